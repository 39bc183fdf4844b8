package rocev2

import "fmt"

// Opcode is a BTH opcode: the transport (top 3 bits) and the operation.
type Opcode uint8

// Transports, in the top three bits of an opcode.
const (
	TransportRC Opcode = 0x00
	TransportUC Opcode = 0x20
	TransportRD Opcode = 0x40
	TransportUD Opcode = 0x60
)

// Operations (low five bits), as in the IBTA spec and Linux's rxe_opcode.c.
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastWithImm    Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyWithImm    Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastWithImm   Opcode = 0x09
	OpWriteOnly          Opcode = 0x0a
	OpWriteOnlyWithImm   Opcode = 0x0b
	OpReadRequest        Opcode = 0x0c
	OpReadResponseFirst  Opcode = 0x0d
	OpReadResponseMiddle Opcode = 0x0e
	OpReadResponseLast   Opcode = 0x0f
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpAtomicAcknowledge  Opcode = 0x12
	OpCompareSwap        Opcode = 0x13
	OpFetchAdd           Opcode = 0x14
)

// Common full opcodes.
const (
	UDSendOnly        = TransportUD | OpSendOnly        // 0x64
	UDSendOnlyWithImm = TransportUD | OpSendOnlyWithImm // 0x65
)

// Transport returns the transport bits of o.
func (o Opcode) Transport() Opcode { return o & 0xe0 }

// Op returns the operation bits of o.
func (o Opcode) Op() Opcode { return o & 0x1f }

// header presence flags.
const (
	hasRETH uint16 = 1 << iota
	hasAETH
	hasAtomicETH
	hasAtomicAckETH
	hasDETH
	hasImm
	hasPayload
	isRequest
	isStart // first or only packet of a message
	isEnd   // last or only packet of a message
	valid
)

// opInfo is indexed by the operation bits; transport validity is checked
// separately.
var opInfo = [32]uint16{
	OpSendFirst:          valid | isRequest | hasPayload | isStart,
	OpSendMiddle:         valid | isRequest | hasPayload,
	OpSendLast:           valid | isRequest | hasPayload | isEnd,
	OpSendLastWithImm:    valid | isRequest | hasPayload | hasImm | isEnd,
	OpSendOnly:           valid | isRequest | hasPayload | isStart | isEnd,
	OpSendOnlyWithImm:    valid | isRequest | hasPayload | hasImm | isStart | isEnd,
	OpWriteFirst:         valid | isRequest | hasRETH | hasPayload | isStart,
	OpWriteMiddle:        valid | isRequest | hasPayload,
	OpWriteLast:          valid | isRequest | hasPayload | isEnd,
	OpWriteLastWithImm:   valid | isRequest | hasPayload | hasImm | isEnd,
	OpWriteOnly:          valid | isRequest | hasRETH | hasPayload | isStart | isEnd,
	OpWriteOnlyWithImm:   valid | isRequest | hasRETH | hasPayload | hasImm | isStart | isEnd,
	OpReadRequest:        valid | isRequest | hasRETH | isStart | isEnd,
	OpReadResponseFirst:  valid | hasAETH | hasPayload | isStart,
	OpReadResponseMiddle: valid | hasPayload,
	OpReadResponseLast:   valid | hasAETH | hasPayload | isEnd,
	OpReadResponseOnly:   valid | hasAETH | hasPayload | isStart | isEnd,
	OpAcknowledge:        valid | hasAETH | isStart | isEnd,
	OpAtomicAcknowledge:  valid | hasAETH | hasAtomicAckETH | isStart | isEnd,
	OpCompareSwap:        valid | isRequest | hasAtomicETH | isStart | isEnd,
	OpFetchAdd:           valid | isRequest | hasAtomicETH | isStart | isEnd,
}

// Valid reports whether o is an opcode this codec knows: every RC opcode,
// the SEND and WRITE opcodes on UC, and SEND_ONLY[_WITH_IMM] on UD.
func (o Opcode) Valid() bool {
	op := o.Op()
	if opInfo[op]&valid == 0 {
		return false
	}
	switch o.Transport() {
	case TransportRC:
		return true
	case TransportUC:
		return op <= OpWriteOnlyWithImm
	case TransportUD:
		return op == OpSendOnly || op == OpSendOnlyWithImm
	}
	return false
}

func (o Opcode) info() uint16 {
	if !o.Valid() {
		return 0
	}
	i := opInfo[o.Op()]
	if o.Transport() == TransportUD {
		i |= hasDETH
	}
	return i
}

// HasImm reports whether packets with opcode o carry ImmDt.
func (o Opcode) HasImm() bool { return o.info()&hasImm != 0 }

// HasRETH reports whether packets with opcode o carry a RETH.
func (o Opcode) HasRETH() bool { return o.info()&hasRETH != 0 }

// IsRequest reports whether o is sent by a requester.
func (o Opcode) IsRequest() bool { return o.info()&isRequest != 0 }

// IsStart reports whether o begins a message (FIRST or ONLY).
func (o Opcode) IsStart() bool { return o.info()&isStart != 0 }

// IsEnd reports whether o ends a message (LAST or ONLY).
func (o Opcode) IsEnd() bool { return o.info()&isEnd != 0 }

// HasPayload reports whether o may carry a payload.
func (o Opcode) HasPayload() bool { return o.info()&hasPayload != 0 }

// HeaderLen returns the length of the transport headers of o (BTH and
// extension headers, without payload or ICRC), or 0 for an invalid opcode.
func (o Opcode) HeaderLen() int { return int(headerLens[o]) }

var headerLens = func() (t [256]uint8) {
	for i := range t {
		t[i] = uint8(Opcode(i).computeHeaderLen())
	}
	return t
}()

func (o Opcode) computeHeaderLen() int {
	i := o.info()
	if i == 0 {
		return 0
	}
	n := BTHLen
	if i&hasDETH != 0 {
		n += DETHLen
	}
	if i&hasRETH != 0 {
		n += RETHLen
	}
	if i&hasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if i&hasAETH != 0 {
		n += AETHLen
	}
	if i&hasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if i&hasImm != 0 {
		n += ImmDtLen
	}
	return n
}

var opNames = [32]string{
	"SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY",
	"SEND_ONLY_WITH_IMMEDIATE", "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST",
	"RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
	"RDMA_READ_REQUEST", "RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_MIDDLE",
	"RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE",
	"COMPARE_SWAP", "FETCH_ADD",
}

func (o Opcode) String() string {
	if !o.Valid() {
		return fmt.Sprintf("Opcode(0x%02x)", uint8(o))
	}
	t := map[Opcode]string{TransportRC: "RC", TransportUC: "UC", TransportUD: "UD"}[o.Transport()]
	return t + "_" + opNames[o.Op()]
}
