package xsk

import "errors"

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

// MetaLen is the metadata the program puts before a redirected frame:
// its receive time.
const MetaLen = 8

// Steerer is an attached steering program: Register makes a socket
// receive its queue's RoCEv2 packets; Close detaches the program.
type Steerer interface {
	Register(queue int, s *Socket) error
	Close() error
}

// AttachPorts loads the steering program with action act for the ports
// p and attaches it to interface ifindex in mode m. It is nil until
// package github.com/seqd/seqd/verbs/soft/xdp is linked: the program is
// built with cilium/ebpf, which a binary that never attaches one (the
// client) should not carry.
var AttachPorts func(ifindex int, p Ports, act Action, m Mode) (Steerer, error)
