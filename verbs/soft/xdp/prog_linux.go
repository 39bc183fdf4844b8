//go:build linux

package xdp

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/seqd/seqd/verbs/soft/internal/xsk"
)

func init() {
	xsk.AttachPorts = func(ifindex int, p xsk.Ports, act xsk.Action, m xsk.Mode) (xsk.Steerer, error) {
		st, err := AttachPorts(ifindex, p, act, m)
		if err != nil {
			return nil, err // not a nil *Steering in a non-nil interface
		}
		return st, nil
	}
}

// Steering is an XDP program attached to one interface, with the XSKMAP
// that names each receive queue's AF_XDP socket.
type Steering struct {
	XSKs *ebpf.Map // key: receive queue index, value: AF_XDP socket fd
	prog *ebpf.Program
	link link.Link
}

// Attach loads the steering program with action act for queues receive
// queues, each on UDP port xsk.RoCEv2Port+i, and attaches it to interface
// ifindex in mode m.
func Attach(ifindex, queues int, act xsk.Action, m xsk.Mode) (*Steering, error) {
	return AttachPorts(ifindex, xsk.Ports{Base: xsk.RoCEv2Port, Queues: queues}, act, m)
}

// xskMapLen is the XSKMAP's size: receive queue indexes at or above it
// pass to the kernel.
const xskMapLen = 256

// AttachPorts loads the steering program with action act for the ports
// p and attaches it to interface ifindex in mode m.
func AttachPorts(ifindex int, p xsk.Ports, act xsk.Action, m xsk.Mode) (*Steering, error) {
	if p.Queues < 1 || p.Queues > xskMapLen {
		return nil, fmt.Errorf("xsk: %d queues: want 1..%d", p.Queues, xskMapLen)
	}
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "seqd_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: xskMapLen})
	if err != nil {
		return nil, fmt.Errorf("%w: XSKMAP: %w", xsk.ErrUnsupported, err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "seqd_roce",
		Type:         ebpf.XDP,
		License:      "Dual MIT/GPL",
		Instructions: program(xsks.FD(), p, act),
	})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("%w: loading the XDP program: %w", xsk.ErrUnsupported, err)
	}
	flags := link.XDPDriverMode
	if m == xsk.Generic {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	if err != nil {
		prog.Close()
		xsks.Close()
		return nil, fmt.Errorf("%w: attaching XDP (%v) to ifindex %d: %w", xsk.ErrUnsupported, m, ifindex, err)
	}
	return &Steering{XSKs: xsks, prog: prog, link: l}, nil
}

// Register makes s receive queue's RoCEv2 packets.
func (st *Steering) Register(queue int, s *xsk.Socket) error {
	return st.XSKs.Put(uint32(queue), uint32(s.FD()))
}

// Close detaches the program.
func (st *Steering) Close() error {
	err := st.link.Close()
	st.prog.Close()
	st.XSKs.Close()
	return err
}

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
func program(xsksFD int, p xsk.Ports, act xsk.Action) asm.Instructions {
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
	if act == xsk.Drop {
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
			asm.Mov.Imm(asm.R2, -xsk.MetaLen),
			asm.FnXdpAdjustMeta.Call(),
			asm.JNE.Imm(asm.R0, 0, redirect),
			asm.LoadMem(asm.R2, asm.R6, xdpMdMeta, asm.Word),
			asm.LoadMem(asm.R3, asm.R6, xdpMdData, asm.Word),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, xsk.MetaLen),
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
