package verbs

import (
	"context"
	"time"
)

// Device is an open RDMA device (an ibv_context).
type Device interface {
	// Name is the device name, such as "mlx5_0" or "soft:127.0.0.1:4791".
	Name() string
	// Attr describes the device's limits.
	Attr() DeviceAttr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue with room for at least cqe
	// completions.
	CreateCQ(cqe int) (CQ, error)
	// Close releases the device. Resources made from it must be closed
	// first.
	Close() error
}

// DeviceAttr are a device's limits and port properties. A zero limit means
// the provider does not report it at device level.
type DeviceAttr struct {
	MaxQP     int
	MaxQPWR   int
	MaxSGE    int
	MaxCQE    int
	MaxMRSize uint64
	// MaxInline is the inline capacity, or 0 where only QP creation says
	// (libibverbs grants it per QP, in the returned capacities).
	MaxInline   int
	MaxRdAtomic int
	ActiveMTU   MTU
	// Queues is the number of independent send/receive engines: UDP
	// sockets in the userspace provider, over which QPs are spread. 0
	// means not applicable: on a NIC every QP is its own engine.
	Queues int
	// AtomicBigEndian says how the responder reads and writes the 8-byte
	// word of an atomic: big endian, or host order (the userspace
	// provider, like Linux's rxe, and mlx5 devices that advertise
	// atomics: the ibv provider derives it from atomic_cap). Code that
	// shares an atomic counter with the CPU must use this order; the
	// conformance suite checks it against what atomics really do.
	AtomicBigEndian bool
	// SourcePorts says whether receive completions carry the sender's
	// UDP source port (WC.Src.Port): the userspace provider sees it; a
	// NIC never shows the UDP header, so its WC.Src.Port is 0.
	SourcePorts bool
	// ArrivedWithin bounds how early a receive completion's WC.Arrived
	// may be: Arrived is never later than the message reached the host,
	// and at most ArrivedWithin earlier, short of rare events the
	// provider documents (its thread preempted inside a receive call, a
	// step of the wall clock). So Arrived+ArrivedWithin is a bound on
	// the arrival from above, which shows that a message arrived before
	// some moment (a client's tag reused after it: spec.Window). 0: no
	// such bound (stamps of a CQ that never drains may be arbitrarily
	// old); Arrived then only bounds the arrival from below.
	ArrivedWithin time.Duration
}

// PD is a protection domain: memory regions, address handles and queue
// pairs made from one PD may be used together.
type PD interface {
	// RegMR allocates length bytes outside the Go heap (so that a NIC may
	// DMA into them) and registers them with the given access rights.
	RegMR(length int, access Access) (MR, error)
	// CreateAH creates an address handle for UD sends.
	CreateAH(attr AHAttr) (AH, error)
	// CreateQP creates a queue pair in the RESET state.
	CreateQP(attr QPInitAttr) (QP, error)
	Close() error
}

// MR is a registered memory region.
type MR interface {
	// Bytes is the region's memory. It must not be used after Close.
	Bytes() []byte
	// Addr is the virtual address of Bytes()[0], as used in SGEs and by
	// remote peers in RDMA and atomic operations.
	Addr() uint64
	LKey() uint32
	RKey() uint32
	Close() error
}

// AH is an address handle: a UD destination.
type AH interface {
	Close() error
}

// AHAttr describes a UD destination.
type AHAttr struct {
	Dest Address
	// PortNum and SGIDIndex select the local port and source GID. 0 (and
	// port 1) mean the port and GID the device was opened with (the ibv
	// provider's "port" and "gid_index" options).
	PortNum      uint8
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// CQ is a completion queue.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	// It never blocks and never allocates.
	Poll(wc []WC) (int, error)
	// Wait blocks until a completion may be ready or ctx is done. It is
	// the blocking counterpart of Poll (ibv_req_notify_cq plus
	// ibv_get_cq_event): callers poll until empty, then Wait.
	Wait(ctx context.Context) error
	Close() error
}

// QPCap are the capacities of a queue pair.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr describes a queue pair to create.
type QPInitAttr struct {
	Type   QPType
	SendCQ CQ
	RecvCQ CQ
	Cap    QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
	// Queue asks for the device's engine (DeviceAttr.Queues) the QP moves
	// its packets through: 0 leaves it to the provider, i+1 names engine
	// i mod Queues. A worker that owns several QPs puts them all on one
	// engine, so that no other worker's thread drives or sends through
	// it. Providers whose every QP is its own engine (a NIC) ignore it.
	Queue int
}

// QP is a queue pair. Every object of this package is safe for use by
// several goroutines; the data path is fastest when one goroutine owns a
// QP and its CQs.
type QP interface {
	QPN() QPN
	Type() QPType
	State() QPState
	// Address is where peers reach this queue pair's port.
	Address() Address
	// Modify changes the attributes selected by mask, moving the QP to
	// attr.State if mask has AttrState. The attributes each transition
	// requires are those of libibverbs (see CheckModify).
	Modify(attr *QPAttr, mask QPAttrMask) error
	// PostSend posts a chain of send work requests: one doorbell. It
	// returns how many were posted; if that is less than len(wrs), err
	// says why wrs[n] was refused and no later one was posted. A gather
	// entry naming memory the QP may not use (bad lkey, out of its region)
	// is refused here by providers that check at post time (soft) and
	// reported as a WCLocProtErr/WCLocLenErr completion by those that
	// cannot (hardware); callers must handle both.
	PostSend(wrs []SendWR) (n int, err error)
	// PostRecv posts a chain of receive work requests, with PostSend's
	// return convention.
	PostRecv(wrs []RecvWR) (n int, err error)
	Close() error
}

// QPAttr are queue pair attributes, selected by a QPAttrMask.
type QPAttr struct {
	State           QPState
	PKeyIndex       uint16
	PortNum         uint8
	QKey            uint32
	AccessFlags     Access
	PathMTU         MTU
	DestQPN         QPN
	RQPSN           PSN
	SQPSN           PSN
	AH              AHAttr // the primary path (connected QPs)
	Timeout         uint8  // local ACK timeout: 4.096 µs × 2^Timeout
	RetryCnt        uint8
	RNRRetry        uint8
	MinRNRTimer     uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
}

// QPAttrMask selects QPAttr fields.
type QPAttrMask uint32

// Attribute mask bits, with libibverbs' values.
const (
	AttrState           QPAttrMask = 1 << 0
	AttrAccessFlags     QPAttrMask = 1 << 3
	AttrPKeyIndex       QPAttrMask = 1 << 4
	AttrPort            QPAttrMask = 1 << 5
	AttrQKey            QPAttrMask = 1 << 6
	AttrAV              QPAttrMask = 1 << 7
	AttrPathMTU         QPAttrMask = 1 << 8
	AttrTimeout         QPAttrMask = 1 << 9
	AttrRetryCnt        QPAttrMask = 1 << 10
	AttrRNRRetry        QPAttrMask = 1 << 11
	AttrRQPSN           QPAttrMask = 1 << 12
	AttrMaxQPRdAtomic   QPAttrMask = 1 << 13
	AttrMinRNRTimer     QPAttrMask = 1 << 15
	AttrSQPSN           QPAttrMask = 1 << 16
	AttrMaxDestRdAtomic QPAttrMask = 1 << 17
	AttrDestQPN         QPAttrMask = 1 << 20
)

// Optional capabilities, as separate small interfaces.

// DoorbellBatcher is implemented by devices whose doorbell can cover sends
// posted on several queue pairs: the userspace provider then moves them
// all with one sendmmsg. Between HoldDoorbell and RingDoorbell, PostSend
// records work requests (their buffers are copied, so they may be reused
// at once) without transmitting them; RingDoorbell transmits everything
// recorded. Holds nest. A NIC rings one doorbell per PostSend, so hardware
// providers do not implement it, and callers use it only as an
// optimisation:
//
//	if b, ok := dev.(verbs.DoorbellBatcher); ok {
//		b.HoldDoorbell()
//		defer b.RingDoorbell()
//	}
type DoorbellBatcher interface {
	HoldDoorbell()
	RingDoorbell()
}

// RecvBufferer is implemented by devices whose receive path holds
// datagrams in a buffer of their own before they meet a posted receive
// (the soft provider's socket receive buffer). RecvBuffer is how many
// datagrams of payload bytes (GRH excluded) that buffer holds, for one
// QP, before it drops one: a mode that promises clients room for their
// packets (eRPC's credits) admits no more than it and the QP's posted
// receives allow. A device without the capability (a NIC: packets land
// in posted receives) limits nothing beyond the receives.
type RecvBufferer interface {
	RecvBuffer(payload int) int
}

// Counters is implemented by devices that count events (packets, drops by
// reason). Visit calls f once per counter; names are stable snake_case.
type Counters interface {
	VisitCounters(f func(name string, value uint64))
}

// AtomicPolicy restricts the remote atomics a region accepts
// (AtomicPolicer): a counter that peers may only take values from, one
// step at a time, up to a ceiling its owner raises.
type AtomicPolicy struct {
	// FetchAdd is the one add a remote FETCH_AND_ADD may carry; it must
	// not be 0. Any other add, and every COMPARE_AND_SWAP, is refused.
	FetchAdd uint64
	// Limit is the highest value a FETCH_AND_ADD may return (the word's
	// value before the add, as the responder's arithmetic reads it). One
	// that finds the word above Limit is held back, not refused: the
	// responder answers receiver-not-ready (RNR NAK) and the requester
	// sends it again after its RNR timer (for ever with RNRRetry 7), so
	// it runs once the owner raises the limit, or fails when the QP is
	// torn down. One that would wrap the word is refused.
	Limit uint64
}

// AtomicPolicer is implemented by PDs whose responder can enforce an
// AtomicPolicy on a region. The responder refuses a request that breaks
// the policy as a NIC refuses an access its R_Key does not allow: a
// remote access error NAK, after which the responding QP is in ERR and
// executes nothing more; the requester's work request completes with
// WCRemAccessErr and its QP moves to ERR. A NIC cannot do this (an MR with
// remote atomic access lets a peer add anything and compare-and-swap),
// so hardware providers do not implement it: callers that must keep
// untrusted peers from moving a counter backward or far ahead check for
// it and, without it, admit only peers they trust.
type AtomicPolicer interface {
	// RegAtomicMR registers length bytes with local write and remote
	// atomic access, every remote atomic on them checked against p.
	RegAtomicMR(length int, p AtomicPolicy) (AtomicMR, error)
}

// AtomicMR is a region registered with an AtomicPolicy.
type AtomicMR interface {
	MR
	// SetAtomicLimit replaces the policy's Limit for atomics executed
	// after it returns.
	SetAtomicLimit(limit uint64)
	// AtomicRefused is how many remote atomics the policy refused.
	AtomicRefused() uint64
}
