package xsk

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// RoCEv2Port is the RoCEv2 UDP destination port.
const RoCEv2Port = 4791

// Action is what the program does with a RoCEv2 packet.
type Action int

const (
	// Redirect sends RoCEv2 packets to the AF_XDP socket registered for
	// the packet's receive queue, and passes them to the kernel when
	// there is none.
	Redirect Action = iota
	// Drop drops RoCEv2 packets: the cheapest receive there is, the
	// reference the other paths are measured against.
	Drop
)

// Mode is where the program runs.
type Mode int

const (
	// Native runs the program in the driver (veth: in its NAPI poll),
	// before an skb exists.
	Native Mode = iota
	// Generic runs it in the stack after the skb is built (any driver).
	Generic
)

func (m Mode) String() string {
	if m == Generic {
		return "generic"
	}
	return "native"
}

// ErrUnsupported is returned when the kernel or the driver lacks what a
// probe needs (BPF, XDP, AF_XDP, a mode).
var ErrUnsupported = errors.New("xsk: unsupported here")

// Steering is an XDP program attached to one interface, with the XSKMAP
// that names each receive queue's AF_XDP socket.
type Steering struct {
	XSKs *ebpf.Map // key: receive queue index, value: AF_XDP socket fd
	prog *ebpf.Program
	link link.Link
}

// Ports is which RoCEv2 packets the program takes, and which AF_XDP
// socket each goes to. The socket of receive queue i (XSKMAP slot i) may
// take only packets the NIC put on queue i (the kernel drops a redirect
// to another queue's socket), so a packet the program would send to
// another queue's socket passes to the kernel instead, whose UDP sockets
// steer it as they do without XDP.
type Ports struct {
	// Base is the first UDP destination port; Queues the number of
	// provider queues.
	Base   uint16
	Queues int
	// Shared: every queue listens on Base (the RoCEv2 port), and queue
	// DestQP mod Queues takes a packet, as the provider's reuseport
	// steering does. Otherwise queue i listens on Base+i.
	Shared bool
}

// Attach loads the steering program with action act for queues receive
// queues, each on UDP port RoCEv2Port+i, and attaches it to interface
// ifindex in mode m.
func Attach(ifindex, queues int, act Action, m Mode) (*Steering, error) {
	return AttachPorts(ifindex, Ports{Base: RoCEv2Port, Queues: queues}, act, m)
}

// xskMapLen is the XSKMAP's size: receive queue indexes at or above it
// pass to the kernel.
const xskMapLen = 256

// AttachPorts loads the steering program with action act for the ports
// p and attaches it to interface ifindex in mode m.
func AttachPorts(ifindex int, p Ports, act Action, m Mode) (*Steering, error) {
	if p.Queues < 1 || p.Queues > xskMapLen {
		return nil, fmt.Errorf("xsk: %d queues: want 1..%d", p.Queues, xskMapLen)
	}
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "seqd_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: xskMapLen})
	if err != nil {
		return nil, fmt.Errorf("%w: XSKMAP: %w", ErrUnsupported, err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "seqd_roce",
		Type:         ebpf.XDP,
		License:      "Dual MIT/GPL",
		Instructions: program(xsks.FD(), p, act),
	})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("%w: loading the XDP program: %w", ErrUnsupported, err)
	}
	flags := link.XDPDriverMode
	if m == Generic {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	if err != nil {
		prog.Close()
		xsks.Close()
		return nil, fmt.Errorf("%w: attaching XDP (%v) to ifindex %d: %w", ErrUnsupported, m, ifindex, err)
	}
	return &Steering{XSKs: xsks, prog: prog, link: l}, nil
}

// Register makes s receive queue's RoCEv2 packets.
func (st *Steering) Register(queue int, s *Socket) error {
	return st.XSKs.Put(uint32(queue), uint32(s.fd))
}

// Close detaches the program.
func (st *Steering) Close() error {
	err := st.link.Close()
	st.prog.Close()
	st.XSKs.Close()
	return err
}

// MetaLen is the metadata the program puts before a redirected frame:
// its receive time.
const MetaLen = 8

// Frame layout the program matches: Ethernet, IPv4 without options, UDP.
const (
	ethLen      = 14
	ipv4Len     = 20
	udpLen      = 8
	hdrsLen     = ethLen + ipv4Len + udpLen
	offEthType  = 12
	offVerIHL   = ethLen
	offFrag     = ethLen + 6
	offProto    = ethLen + 9
	offUDPDst   = ethLen + ipv4Len + 2
	xdpDrop     = 1
	xdpPass     = 2
	xdpMdData   = 0
	xdpMdEnd    = 4
	xdpMdMeta   = 8
	xdpMdRxQIdx = 16
)

// program returns the XDP program: an unfragmented IPv4 packet without
// options to one of p's UDP ports, which p gives to the receive queue it
// arrived on, gets act (redirect to xsks[rx_queue_index], XDP_PASS when
// that slot is empty; or drop); everything else (ARP, other ports, a
// packet for another queue, fragments, IPv4 options, IPv6) passes to the
// kernel. The loads of 16-bit fields compare against network-order
// constants read as little-endian words, or are byte-swapped first.
func program(xsksFD int, p Ports, act Action) asm.Instructions {
	const pass = "pass"
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R1, xdpMdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, xdpMdEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, hdrsLen),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		asm.LoadMem(asm.R5, asm.R2, offEthType, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, pass), // 0x0800 IPv4
		asm.LoadMem(asm.R5, asm.R2, offVerIHL, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, pass),
		asm.LoadMem(asm.R5, asm.R2, offProto, asm.Byte),
		asm.JNE.Imm(asm.R5, 17, pass),
		asm.LoadMem(asm.R5, asm.R2, offFrag, asm.Half),
		asm.And.Imm(asm.R5, 0xff3f), // MF and fragment offset
		asm.JNE.Imm(asm.R5, 0, pass),
		asm.LoadMem(asm.R5, asm.R2, offUDPDst, asm.Half),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.LoadMem(asm.R7, asm.R6, xdpMdRxQIdx, asm.Word),
	}
	if p.Shared && p.Queues > 1 {
		// Port Base, and queue DestQP mod Queues: the BTH's bytes 5-7.
		insns = append(insns,
			asm.JNE.Imm(asm.R5, int32(p.Base), pass),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, hdrsLen+8),
			asm.JGT.Reg(asm.R4, asm.R3, pass),
			asm.LoadMem(asm.R5, asm.R2, hdrsLen+4, asm.Word),
			asm.HostTo(asm.BE, asm.R5, asm.Word),
			asm.And.Imm(asm.R5, 0xffffff),
			asm.Mod.Imm(asm.R5, int32(p.Queues)),
			asm.JNE.Reg(asm.R5, asm.R7, pass),
		)
	} else {
		// Queue i's port is Base+i.
		insns = append(insns,
			asm.Sub.Imm(asm.R5, int32(p.Base)),
			asm.JGE.Imm(asm.R5, int32(p.Queues), pass), // unsigned: below Base wraps
			asm.JNE.Reg(asm.R5, asm.R7, pass),
		)
	}
	if act == Drop {
		insns = append(insns, asm.Mov.Imm(asm.R0, xdpDrop), asm.Return())
	} else {
		// The receive time (CLOCK_MONOTONIC ns) in 8 bytes of metadata
		// before the frame, which copy mode copies into the UMEM with it
		// (RxTime); without room for them, none.
		const redirect = "redirect"
		insns = append(insns,
			asm.FnKtimeGetNs.Call(),
			asm.Mov.Reg(asm.R8, asm.R0),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, -MetaLen),
			asm.FnXdpAdjustMeta.Call(),
			asm.JNE.Imm(asm.R0, 0, redirect),
			asm.LoadMem(asm.R2, asm.R6, xdpMdMeta, asm.Word),
			asm.LoadMem(asm.R3, asm.R6, xdpMdData, asm.Word),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, MetaLen),
			asm.JGT.Reg(asm.R4, asm.R3, redirect),
			asm.StoreMem(asm.R2, 0, asm.R8, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.R7).WithSymbol(redirect),
			asm.LoadMapPtr(asm.R1, xsksFD),
			asm.Mov.Imm(asm.R3, xdpPass), // the action when the slot is empty
			asm.FnRedirectMap.Call(),
			asm.Return(),
		)
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol(pass),
		asm.Return(),
	)
}
