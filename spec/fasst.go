package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FaSST mode (PROTOCOL.md, "FaSST"): requests and answers are UD SENDs
// without an immediate whose payload starts with a small RPC header, as
// in FaSST's RPC layer (Kalia et al., OSDI '16, §4; the thesis, §5.3).
//
// Request, FaSSTRequestLen bytes:
//
//	 0         1         2                 4                                 8
//	+---------+---------+-----------------+---------------------------------+
//	| version | opcode  | count k (BE 16) |   request ID (big endian, 32)   |
//	+---------+---------+-----------------+---------------------------------+
//
// Answer, FaSSTAnswerLen bytes: the same header with opcode
// FaSSTOpAnswer, echoing the request's count and ID, then the first of
// the k consecutive values (big endian). The values are first,
// first+1, ..., first+k-1.
const (
	FaSSTVersion = 1
	// FaSSTOpRequest asks for k values; FaSSTOpAnswer carries them.
	FaSSTOpRequest = 1
	FaSSTOpAnswer  = 2

	FaSSTHeaderLen  = 8
	FaSSTRequestLen = FaSSTHeaderLen
	FaSSTAnswerLen  = FaSSTHeaderLen + 8

	// FaSSTMaxCount is the largest window of a client QP: the most
	// values of coalesced callers it keeps in flight, and the most
	// request IDs (slots) it has.
	FaSSTMaxCount = MaxWindow

	// FaSSTMaxRange is the most values one request asks for: a request
	// may stand for one caller's range of k consecutive values (a range
	// request, client.GetRange), which the window does not bound; the
	// window bounds the requests of a client QP in flight. PD's client
	// merges at most 10,000 callers into one TSO request.
	FaSSTMaxRange = 1 << 14

	// HybridMillisecond is the number of hybrid values in one
	// millisecond. In the hybrid format a server never answers a request
	// for k > 1 values whose values span a millisecond boundary: the k
	// values share their physical part, so that the last one's
	// (physical, logical) split gives every one of them a logical part
	// in [0, 2^18), as PD's TSO does (PROTOCOL.md, "FaSST", "Ranges").
	HybridMillisecond = 1 << HybridLogicalBits

	// FaSSTGenBits is the least width of a request ID's generation (the
	// ID's bits above the slot number, at most 11 of them with
	// FaSSTMaxCount slots). An ID repeats only after 2^FaSSTGenBits
	// transmissions from one slot: within MaxAnswerDelay (8 ms) that
	// would take 2^21 / 8 ms = 262 M packets/s from one QP, beyond any
	// NIC's message rate, so no answer can be late enough to match a
	// later transmission (PROTOCOL.md, "FaSST").
	FaSSTGenBits = 32 - 11
)

// The slot number must leave FaSSTGenBits of the ID to the generation.
var _ = [1]struct{}{}[boolToInt(FaSSTMaxCount <= 1<<(32-FaSSTGenBits))-1]

// A range fits the 16-bit count and one millisecond of hybrid values.
var _ = [1]struct{}{}[boolToInt(FaSSTMaxRange < 1<<16 && FaSSTMaxRange <= HybridMillisecond && FaSSTMaxRange >= FaSSTMaxCount)-1]

// CrossesMillisecond reports whether the k values first … first+k−1
// span a millisecond boundary of the hybrid format (their physical parts
// differ). A server in the hybrid format never answers such a range
// (HybridMillisecond).
func CrossesMillisecond(first uint64, k int) bool {
	return k > 1 && first>>HybridLogicalBits != (first+uint64(k-1))>>HybridLogicalBits
}

// Errors of the FaSST decoders (besides ErrBadLength).
var (
	ErrFaSSTVersion = errors.New("spec: bad fasst version")
	ErrFaSSTOpcode  = errors.New("spec: bad fasst opcode")
	ErrFaSSTCount   = errors.New("spec: fasst count out of range")
)

// FaSSTID is a request ID. The client draws a fresh one for every
// transmission (a retransmission too), and the answer echoes it; the
// server treats it as opaque.
type FaSSTID uint32

func (i FaSSTID) String() string { return fmt.Sprintf("rid:0x%08x", uint32(i)) }

// FaSSTHeader is a decoded request or answer header.
type FaSSTHeader struct {
	Op    uint8
	Count int
	ID    FaSSTID
}

func putFaSSTHeader(b []byte, op uint8, k int, id FaSSTID) error {
	if k < 1 || k > FaSSTMaxRange {
		return fmt.Errorf("%w: %d", ErrFaSSTCount, k)
	}
	b[0], b[1] = FaSSTVersion, op
	binary.BigEndian.PutUint16(b[2:], uint16(k))
	binary.BigEndian.PutUint32(b[4:], uint32(id))
	return nil
}

// PutFaSSTRequest encodes a request for k values under id into b, which
// must hold FaSSTRequestLen bytes.
func PutFaSSTRequest(b []byte, k int, id FaSSTID) error {
	if len(b) < FaSSTRequestLen {
		return fmt.Errorf("%w: request buffer of %d bytes, want %d", ErrBadLength, len(b), FaSSTRequestLen)
	}
	return putFaSSTHeader(b, FaSSTOpRequest, k, id)
}

// PutFaSSTAnswer encodes the answer to request id for k values starting
// at first into b, which must hold FaSSTAnswerLen bytes.
func PutFaSSTAnswer(b []byte, k int, id FaSSTID, first uint64) error {
	if len(b) < FaSSTAnswerLen {
		return fmt.Errorf("%w: answer buffer of %d bytes, want %d", ErrBadLength, len(b), FaSSTAnswerLen)
	}
	if err := putFaSSTHeader(b, FaSSTOpAnswer, k, id); err != nil {
		return err
	}
	binary.BigEndian.PutUint64(b[FaSSTHeaderLen:], first)
	return nil
}

func decodeFaSSTHeader(b []byte, op uint8) (FaSSTHeader, error) {
	h := FaSSTHeader{Op: b[1], Count: int(binary.BigEndian.Uint16(b[2:])), ID: FaSSTID(binary.BigEndian.Uint32(b[4:]))}
	switch {
	case b[0] != FaSSTVersion:
		return h, fmt.Errorf("%w: %d", ErrFaSSTVersion, b[0])
	case h.Op != op:
		return h, fmt.Errorf("%w: %d, want %d", ErrFaSSTOpcode, h.Op, op)
	case h.Count < 1 || h.Count > FaSSTMaxRange:
		return h, fmt.Errorf("%w: %d", ErrFaSSTCount, h.Count)
	}
	return h, nil
}

// DecodeFaSSTRequest decodes a request payload (GRH area removed;
// untrusted).
func DecodeFaSSTRequest(b []byte) (FaSSTHeader, error) {
	if len(b) != FaSSTRequestLen {
		return FaSSTHeader{}, fmt.Errorf("%w: request carries %d bytes, want %d", ErrBadLength, len(b), FaSSTRequestLen)
	}
	return decodeFaSSTHeader(b, FaSSTOpRequest)
}

// DecodeFaSSTAnswer decodes an answer payload (GRH area removed;
// untrusted) and returns its header and first value.
func DecodeFaSSTAnswer(b []byte) (FaSSTHeader, uint64, error) {
	if len(b) != FaSSTAnswerLen {
		return FaSSTHeader{}, 0, fmt.Errorf("%w: answer carries %d bytes, want %d", ErrBadLength, len(b), FaSSTAnswerLen)
	}
	h, err := decodeFaSSTHeader(b, FaSSTOpAnswer)
	if err != nil {
		return h, 0, err
	}
	return h, binary.BigEndian.Uint64(b[FaSSTHeaderLen:]), nil
}

// FaSSTSlots is the request-ID table of one client QP: at most n
// requests in flight, each in a slot. A request ID is the slot number in
// its low bits and the slot's generation above them; every transmission
// (Take, Renew) bumps the generation, so the ID is fresh, and an answer
// is accepted only for the current ID of a busy slot with the count it
// was sent with. An answer to an earlier transmission, to a released
// slot or a duplicate is stale. The generation wraps after
// 2^(32-bits) transmissions of one slot, far longer than any answer can
// be late (MaxPacketLifetime + MaxResidence).
//
// It is pure logic: no I/O, no clock. Not safe for concurrent use.
type FaSSTSlots struct {
	bits  uint
	slots []fasstSlot
	free  []uint32
}

type fasstSlot struct {
	id    FaSSTID
	count int
	busy  bool
}

// NewFaSSTSlots returns a table of n slots (1 ≤ n ≤ FaSSTMaxCount).
func NewFaSSTSlots(n int) (*FaSSTSlots, error) {
	if n < 1 || n > FaSSTMaxCount {
		return nil, fmt.Errorf("%w: %d slots", ErrFaSSTCount, n)
	}
	t := &FaSSTSlots{slots: make([]fasstSlot, n), free: make([]uint32, n)}
	for t.bits = 0; 1<<t.bits < n; t.bits++ {
	}
	for i := range t.slots {
		t.slots[i].id = FaSSTID(i)
		t.free[i] = uint32(n - 1 - i)
	}
	return t, nil
}

// Free is how many slots are free.
func (t *FaSSTSlots) Free() int { return len(t.free) }

// Len is the number of slots.
func (t *FaSSTSlots) Len() int { return len(t.slots) }

func (t *FaSSTSlots) bump(s int) FaSSTID {
	sl := &t.slots[s]
	sl.id = FaSSTID(uint32(sl.id) + 1<<t.bits)
	return sl.id
}

// Take reserves a free slot for a request of count values and returns
// the slot and the ID to send; ok is false when every slot is busy.
func (t *FaSSTSlots) Take(count int) (slot int, id FaSSTID, ok bool) {
	if len(t.free) == 0 {
		return 0, 0, false
	}
	slot = int(t.free[len(t.free)-1])
	t.free = t.free[:len(t.free)-1]
	sl := &t.slots[slot]
	sl.busy, sl.count = true, count
	return slot, t.bump(slot), true
}

// Renew gives busy slot a fresh ID, for a retransmission of count values
// (the live callers left in it): an answer to the previous ID is stale
// from now on.
func (t *FaSSTSlots) Renew(slot, count int) FaSSTID {
	t.slots[slot].count = count
	return t.bump(slot)
}

// Match returns the busy slot whose current ID is id and whose count is
// count. ok is false for a stale answer (no such slot, an earlier ID, a
// released slot) and for a count that differs from the one sent.
func (t *FaSSTSlots) Match(id FaSSTID, count int) (slot int, ok bool) {
	slot = int(uint32(id) & (1<<t.bits - 1))
	if slot >= len(t.slots) {
		return 0, false
	}
	sl := &t.slots[slot]
	if !sl.busy || sl.id != id || sl.count != count {
		return 0, false
	}
	return slot, true
}

// Release frees slot (answered, or every caller in it gave up); its
// generation moves on so that no answer to it matches again.
func (t *FaSSTSlots) Release(slot int) {
	sl := &t.slots[slot]
	if !sl.busy {
		return
	}
	sl.busy = false
	t.bump(slot)
	t.free = append(t.free, uint32(slot))
}

// ID returns busy slot's current ID.
func (t *FaSSTSlots) ID(slot int) FaSSTID { return t.slots[slot].id }

// Count returns the count slot was last sent with.
func (t *FaSSTSlots) Count(slot int) int { return t.slots[slot].count }
