package rocev2

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Header lengths.
const (
	BTHLen          = 12
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	ICRCLen         = 4
	// UDPPort is the RoCEv2 destination port.
	UDPPort = 4791
	// DefaultPKey is the full-membership default partition key.
	DefaultPKey = 0xffff
)

// Decoding errors.
var (
	ErrTruncated  = errors.New("rocev2: packet truncated")
	ErrBadOpcode  = errors.New("rocev2: invalid opcode")
	ErrBadVersion = errors.New("rocev2: unsupported transport header version")
	ErrBadPad     = errors.New("rocev2: pad count exceeds payload")
	ErrBadICRC    = errors.New("rocev2: ICRC mismatch")
	ErrNotRoCE    = errors.New("rocev2: not a RoCEv2 IPv4/UDP packet")
)

// AETH syndromes (top three bits select the kind).
const (
	AETHAck                 uint8 = 0x00 // | credit count
	AETHRNRNak              uint8 = 0x20 // | timer
	AETHNak                 uint8 = 0x60 // | NAK code
	AETHNakSeqErr           uint8 = 0x60
	AETHNakInvReq           uint8 = 0x61
	AETHNakRemAcc           uint8 = 0x62
	AETHNakRemOp            uint8 = 0x63
	AETHNakInvRdReq         uint8 = 0x64
	AETHAckUnlimitedCredits uint8 = 0x1f
)

// Packet is a decoded RoCEv2 transport packet: the BTH, the extension
// headers its opcode calls for, and the payload. Fields of absent headers
// are zero. Payload aliases the decoded buffer.
type Packet struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8
	TVer   uint8
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32 // 24 bits
	AckReq bool
	PSN    uint32 // 24 bits

	// DETH (UD).
	QKey  uint32
	SrcQP uint32

	// RETH (RDMA WRITE first/only, READ request) and AtomicETH.
	VA     uint64
	RKey   uint32
	DMALen uint32 // RETH only

	// AtomicETH.
	SwapAdd uint64
	Compare uint64

	// AETH.
	Syndrome uint8
	MSN      uint32

	// AtomicAckETH.
	OrigData uint64

	// ImmDt, as the host-order value of the big-endian field.
	Imm uint32

	Payload []byte
}

// Len returns the encoded length of p: headers, payload, pad and ICRC.
func (p *Packet) Len() int {
	n := len(p.Payload)
	return p.Opcode.HeaderLen() + n + padFor(n) + ICRCLen
}

func padFor(n int) int { return (4 - n&3) & 3 }

// Decode parses a RoCEv2 UDP payload (BTH through ICRC) into p. It checks
// structure only; the ICRC is checked by VerifyICRC, which needs the IP and
// UDP headers. It never panics and does not allocate.
func (p *Packet) Decode(b []byte) error {
	if len(b) < BTHLen+ICRCLen {
		return ErrTruncated
	}
	op := Opcode(b[0])
	info := op.info()
	if info == 0 {
		return fmt.Errorf("%w 0x%02x", ErrBadOpcode, b[0])
	}
	*p = Packet{
		Opcode: op,
		SE:     b[1]&0x80 != 0,
		MigReq: b[1]&0x40 != 0,
		PadCnt: (b[1] >> 4) & 3,
		TVer:   b[1] & 0x0f,
		PKey:   binary.BigEndian.Uint16(b[2:]),
		FECN:   b[4]&0x80 != 0,
		BECN:   b[4]&0x40 != 0,
		DestQP: uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]),
		AckReq: b[8]&0x80 != 0,
		PSN:    uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11]),
	}
	if p.TVer != 0 {
		return ErrBadVersion
	}
	hl := op.HeaderLen()
	if len(b) < hl+ICRCLen {
		return ErrTruncated
	}
	h := b[BTHLen:hl]
	if info&hasDETH != 0 {
		p.QKey = binary.BigEndian.Uint32(h)
		p.SrcQP = binary.BigEndian.Uint32(h[4:]) & 0xffffff
		h = h[DETHLen:]
	}
	if info&hasRETH != 0 {
		p.VA = binary.BigEndian.Uint64(h)
		p.RKey = binary.BigEndian.Uint32(h[8:])
		p.DMALen = binary.BigEndian.Uint32(h[12:])
		h = h[RETHLen:]
	}
	if info&hasAtomicETH != 0 {
		p.VA = binary.BigEndian.Uint64(h)
		p.RKey = binary.BigEndian.Uint32(h[8:])
		p.SwapAdd = binary.BigEndian.Uint64(h[12:])
		p.Compare = binary.BigEndian.Uint64(h[20:])
		h = h[AtomicETHLen:]
	}
	if info&hasAETH != 0 {
		p.Syndrome = h[0]
		p.MSN = uint32(h[1])<<16 | uint32(h[2])<<8 | uint32(h[3])
		h = h[AETHLen:]
	}
	if info&hasAtomicAckETH != 0 {
		p.OrigData = binary.BigEndian.Uint64(h)
		h = h[AtomicAckETHLen:]
	}
	if info&hasImm != 0 {
		p.Imm = binary.BigEndian.Uint32(h)
	}
	payload := b[hl : len(b)-ICRCLen]
	if info&hasPayload == 0 && len(payload) != 0 {
		return fmt.Errorf("%w: %v carries %d payload bytes", ErrTruncated, op, len(payload))
	}
	if int(p.PadCnt) > len(payload) {
		return ErrBadPad
	}
	p.Payload = payload[:len(payload)-int(p.PadCnt)]
	return nil
}

// Encode writes p (headers, payload, zero pad) into b and returns the
// number of bytes written, including a zero ICRC placeholder that
// PutICRC fills. PadCnt is derived from the payload length. b must hold
// p.Len() bytes.
func (p *Packet) Encode(b []byte) (int, error) {
	info := p.Opcode.info()
	if info == 0 {
		return 0, fmt.Errorf("%w 0x%02x", ErrBadOpcode, uint8(p.Opcode))
	}
	if info&hasPayload == 0 && len(p.Payload) != 0 {
		return 0, fmt.Errorf("rocev2: %v carries no payload", p.Opcode)
	}
	n := p.Len()
	if len(b) < n {
		return 0, ErrTruncated
	}
	pad := padFor(len(p.Payload))
	hl := p.EncodeHeaders(b, pad)
	copy(b[hl:], p.Payload)
	o := hl + len(p.Payload)
	for i := 0; i < pad+ICRCLen; i++ {
		b[o+i] = 0
	}
	return n, nil
}

// EncodeHeaders writes the BTH and extension headers of p into b, with the
// given pad count, and returns their length. b must be long enough.
func (p *Packet) EncodeHeaders(b []byte, pad int) int {
	info := p.Opcode.info()
	b[0] = byte(p.Opcode)
	b[1] = byte(pad&3)<<4 | p.TVer&0x0f
	if p.SE {
		b[1] |= 0x80
	}
	if p.MigReq {
		b[1] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:], p.PKey)
	b[4] = 0
	if p.FECN {
		b[4] |= 0x80
	}
	if p.BECN {
		b[4] |= 0x40
	}
	put24(b[5:], p.DestQP)
	b[8] = 0
	if p.AckReq {
		b[8] = 0x80
	}
	put24(b[9:], p.PSN)
	h := b[BTHLen:]
	if info&hasDETH != 0 {
		binary.BigEndian.PutUint32(h, p.QKey)
		binary.BigEndian.PutUint32(h[4:], p.SrcQP&0xffffff)
		h = h[DETHLen:]
	}
	if info&hasRETH != 0 {
		binary.BigEndian.PutUint64(h, p.VA)
		binary.BigEndian.PutUint32(h[8:], p.RKey)
		binary.BigEndian.PutUint32(h[12:], p.DMALen)
		h = h[RETHLen:]
	}
	if info&hasAtomicETH != 0 {
		binary.BigEndian.PutUint64(h, p.VA)
		binary.BigEndian.PutUint32(h[8:], p.RKey)
		binary.BigEndian.PutUint64(h[12:], p.SwapAdd)
		binary.BigEndian.PutUint64(h[20:], p.Compare)
		h = h[AtomicETHLen:]
	}
	if info&hasAETH != 0 {
		h[0] = p.Syndrome
		put24(h[1:], p.MSN)
		h = h[AETHLen:]
	}
	if info&hasAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(h, p.OrigData)
		h = h[AtomicAckETHLen:]
	}
	if info&hasImm != 0 {
		binary.BigEndian.PutUint32(h, p.Imm)
	}
	return p.Opcode.HeaderLen()
}

func put24(b []byte, v uint32) {
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
