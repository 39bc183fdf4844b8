package verbs

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// QPN is a 24-bit queue pair number.
type QPN uint32

// MaxQPN is the largest valid queue pair number.
const MaxQPN QPN = 1<<24 - 1

func (q QPN) String() string { return fmt.Sprintf("qpn:0x%06x", uint32(q)) }

// PSN is a 24-bit packet sequence number.
type PSN uint32

// PSNMask masks a value to the 24 bits of a PSN.
const PSNMask = 1<<24 - 1

func (p PSN) String() string { return fmt.Sprintf("psn:%d", uint32(p)) }

// Add returns p+n modulo 2^24.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & PSNMask) }

// Diff returns the signed distance p-q in the 24-bit PSN space, in
// [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// GID is a 128-bit global identifier. RoCEv2 over IPv4 uses the
// IPv4-mapped form ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address (IPv4 addresses are mapped).
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address, unmapping IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

func (g GID) String() string { return g.Addr().String() }

// Address is where a port of a device can be reached: what peers exchange
// out of band (seqd does it over its admin plane) to build address handles
// and connect queue pairs.
//
// GID and LID mean what they mean in InfiniBand. Port is the UDP port of
// the transport: 0 means the RoCEv2 port 4791, which is what every hardware
// NIC uses; the userspace provider gives each of its queues its own port so
// that several devices can share one host.
type Address struct {
	GID  GID
	LID  uint16
	Port uint16
}

// RoCEv2Port is the UDP destination port of RoCEv2 (IANA 4791).
const RoCEv2Port = 4791

// RoCEPort returns the UDP port a's packets go to: a.Port, or the RoCEv2
// port for 0. Port 0 and 4791 name the same thing.
func (a Address) RoCEPort() uint16 {
	if a.Port == 0 {
		return RoCEv2Port
	}
	return a.Port
}

// AddressLen is the length of an Address in its binary form.
const AddressLen = 20

// AppendBinary appends the 20-byte binary form of a: GID, LID, Port (big
// endian).
func (a Address) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, a.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, a.LID)
	b = binary.BigEndian.AppendUint16(b, a.Port)
	return b, nil
}

// MarshalBinary returns the 20-byte binary form of a.
func (a Address) MarshalBinary() ([]byte, error) { return a.AppendBinary(make([]byte, 0, AddressLen)) }

// UnmarshalBinary parses the 20-byte binary form of an Address.
func (a *Address) UnmarshalBinary(b []byte) error {
	if len(b) != AddressLen {
		return fmt.Errorf("%w: address is %d bytes, want %d", ErrInvalidArgument, len(b), AddressLen)
	}
	copy(a.GID[:], b[:16])
	a.LID = binary.BigEndian.Uint16(b[16:])
	a.Port = binary.BigEndian.Uint16(b[18:])
	return nil
}

func (a Address) String() string {
	if a.Port != 0 {
		return netip.AddrPortFrom(a.GID.Addr(), a.Port).String()
	}
	if a.LID != 0 {
		return fmt.Sprintf("%s/lid:%d", a.GID, a.LID)
	}
	return a.GID.String()
}

// QPType is the transport service of a queue pair.
type QPType uint8

// Queue pair types.
const (
	RC QPType = iota + 1 // reliable connected
	UC                   // unreliable connected
	UD                   // unreliable datagram
)

func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is the state of a queue pair.
type QPState uint8

// Queue pair states, in the order of bring-up.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

func (s QPState) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateInit:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateSQD:
		return "SQD"
	case StateSQE:
		return "SQE"
	case StateErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// Access are the access rights of a memory region or of a queue pair's
// responder.
type Access uint32

// Access flags, with libibverbs' values.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// MTU is a path MTU as an enumeration, as in libibverbs.
type MTU uint8

// Path MTUs.
const (
	MTU256 MTU = iota + 1
	MTU512
	MTU1024
	MTU2048
	MTU4096
)

// Bytes returns the MTU in bytes, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Opcode is the operation of a send work request.
type Opcode uint8

// Send opcodes.
const (
	OpSend Opcode = iota + 1
	OpSendWithImm
	OpRDMAWrite
	OpRDMAWriteWithImm
	OpRDMARead
	OpAtomicFetchAdd
	OpAtomicCmpSwap
)

func (o Opcode) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpSendWithImm:
		return "SEND_WITH_IMM"
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpRDMARead:
		return "RDMA_READ"
	case OpAtomicFetchAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case OpAtomicCmpSwap:
		return "ATOMIC_CMP_AND_SWP"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// SendFlags modify a send work request.
type SendFlags uint8

// Send flags.
const (
	// Signaled asks for a completion for this work request (always given
	// when the QP was created with SigAll).
	Signaled SendFlags = 1 << iota
	// Inline copies the payload into the work request at post time: the
	// buffers may be reused as soon as PostSend returns. (libibverbs also
	// lets inline SGEs name unregistered memory; Go code cannot hand a
	// provider a raw pointer into Go memory, so here SGEs always name
	// registered memory and the userspace provider checks their lkey.)
	Inline
	// Fence waits for earlier RDMA READs and atomics to finish.
	Fence
	// Solicited sets the solicited-event bit.
	Solicited
)

// WCStatus is the status of a work completion.
type WCStatus uint8

// Completion statuses, with the meaning of their libibverbs namesakes.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocProtErr
	WCWRFlushErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCGeneralErr
	// WCDeadlineErr: the send was not transmitted because its
	// SendWR.Deadline passed first (no libibverbs namesake).
	WCDeadlineErr
)

func (s WCStatus) String() string {
	switch s {
	case WCSuccess:
		return "success"
	case WCLocLenErr:
		return "local length error"
	case WCLocQPOpErr:
		return "local QP operation error"
	case WCLocProtErr:
		return "local protection error"
	case WCWRFlushErr:
		return "WR flushed"
	case WCRemInvReqErr:
		return "remote invalid request error"
	case WCRemAccessErr:
		return "remote access error"
	case WCRemOpErr:
		return "remote operation error"
	case WCRetryExcErr:
		return "transport retry counter exceeded"
	case WCRNRRetryExcErr:
		return "RNR retry counter exceeded"
	case WCGeneralErr:
		return "general error"
	case WCDeadlineErr:
		return "deadline passed before transmit"
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is the operation a work completion reports.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend WCOpcode = iota + 1
	WCRDMAWrite
	WCRDMARead
	WCCompSwap
	WCFetchAdd
	WCRecv
	WCRecvRDMAWithImm
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags describe a work completion.
type WCFlags uint8

// Completion flags.
const (
	// WCWithImm: Imm holds immediate data from the sender.
	WCWithImm WCFlags = 1 << iota
	// WCGRH: the first 40 bytes of the receive buffer hold a GRH.
	WCGRH
)
