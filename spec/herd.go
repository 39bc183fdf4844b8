package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HERDVersion is the version byte every HERD request slot carries.
const HERDVersion = 1

// Layout of one HERD request slot: SlotLen bytes in the server's request
// region, written by the client with one inlined UC RDMA WRITE.
//
//	 0        1        2                 4                                 8
//	+--------+--------+-----------------+---------------------------------+
//	|version | opcode |  reserved (0)   |   seq (big endian, 24 bits)     |
//	+--------+--------+-----------------+---------------------------------+
//
// The sequence number sits in the last four bytes: a NIC places a WRITE in
// increasing address order, so a server that sees a non-zero seq sees the
// whole request (HERD polls the last byte of its slots for the same
// reason). Zero marks an empty slot; the server zeroes a slot before it
// answers.
const (
	SlotLen = 8
	// SlotSeqOff is the offset of the sequence number in a slot.
	SlotSeqOff = 4
	// SeqBits is the width of a slot sequence number; sequence numbers
	// run 1..SeqMask and wrap to 1 (0 means "empty").
	SeqBits = 24
	SeqMask = 1<<SeqBits - 1
	// HERDMaxWindow is the most slots (window positions) one client QP
	// gets: the position must fit the answer immediate's PosBits.
	HERDMaxWindow = 1 << PosBits
	// PosBits is the width of the window position in an answer immediate.
	PosBits = 32 - SeqBits
	// HERDAnswerLen is the payload of a HERD answer: the value, big endian.
	HERDAnswerLen = 8
)

// HERD slot opcodes.
const (
	// OpGetTimestamp asks for one value.
	OpGetTimestamp = 1
)

// Errors of the HERD decoders.
var (
	ErrEmptySlot  = errors.New("spec: empty slot")
	ErrBadVersion = errors.New("spec: bad slot version")
	ErrBadOpcode  = errors.New("spec: bad slot opcode")
	ErrBadSeq     = errors.New("spec: sequence number out of range")
	ErrBadPos     = errors.New("spec: window position out of range")
)

// Seq is a HERD slot sequence number: 1..SeqMask, never 0.
type Seq uint32

// Valid reports whether s is a usable sequence number.
func (s Seq) Valid() bool { return s != 0 && s <= SeqMask }

// Next returns the sequence number after s, skipping 0.
func (s Seq) Next() Seq {
	n := (s + 1) & SeqMask
	if n == 0 {
		n = 1
	}
	return n
}

func (s Seq) String() string { return fmt.Sprintf("seq:%d", uint32(s)) }

// HERDMaxStep is the most a request's sequence number may run ahead of
// the last one the server answered on its slot: the server takes seq only
// when 1 <= seq-last <= HERDMaxStep (24-bit serial arithmetic, last 0
// before the slot's first answer). A stray or hostile WRITE of a seq far
// ahead (2^23, say) is dropped and leaves the slot as it was; one within
// the step moves last by at most HERDMaxStep, and the owner's own WRITEs
// pass it again after at most HERDMaxStep bumps. The client keeps its
// seq within HERDMaxStep of the last answer it saw on the position
// (answers from the server only) and reconnects when it cannot: more
// than HERDMaxStep WRITEs of one position went unanswered.
const HERDMaxStep = 1 << 10

// HERDStep classifies a request seq found in a slot whose last answered
// seq is last (0: none yet).
type HERDStep uint8

const (
	// StepNew: within HERDMaxStep after last; the server takes it.
	StepNew HERDStep = iota
	// StepOld: last itself or before it (a duplicate or a late WRITE).
	StepOld
	// StepAhead: more than HERDMaxStep after last (a stray or hostile
	// WRITE, or a client that lost count).
	StepAhead
)

// SeqDistance is how far b is after a in 24-bit serial arithmetic:
// (b-a) mod 2^24, in 0..SeqMask.
func SeqDistance(a, b Seq) uint32 { return uint32(b-a) & SeqMask }

// Before reports whether s comes before t in serial arithmetic: t is
// less than half the sequence space ahead of s.
func (s Seq) Before(t Seq) bool {
	d := SeqDistance(s, t)
	return d != 0 && d < 1<<(SeqBits-1)
}

// HERDClassify is the server's check of a request seq against the last
// seq it answered on the slot.
func HERDClassify(last, seq Seq) HERDStep {
	switch d := SeqDistance(last, seq); {
	case d == 0 || d >= 1<<(SeqBits-1):
		return StepOld
	case d > HERDMaxStep:
		return StepAhead
	}
	return StepNew
}

// Slot is a decoded request slot.
type Slot struct {
	Version uint8
	Opcode  uint8
	Seq     Seq
}

// PutSlot encodes a GetTimestamp request with sequence number s into b,
// which must hold SlotLen bytes.
func PutSlot(b []byte, s Seq) error {
	if len(b) < SlotLen {
		return fmt.Errorf("%w: slot buffer of %d bytes, want %d", ErrBadLength, len(b), SlotLen)
	}
	if !s.Valid() {
		return fmt.Errorf("%w: %d", ErrBadSeq, uint32(s))
	}
	b[0], b[1], b[2], b[3] = HERDVersion, OpGetTimestamp, 0, 0
	binary.BigEndian.PutUint32(b[SlotSeqOff:], uint32(s))
	return nil
}

// SlotWord returns the slot as the server's 8-byte load sees it, in
// memory order: the same bytes PutSlot writes, as a little-endian word.
// The server compares and clears whole words with single atomic
// operations.
func SlotWord(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// DecodeSlot decodes the bytes of one slot (untrusted: the client QP that
// owns the block writes them, buggy or not, and so can a forger on its
// connection). An all-zero slot is ErrEmptySlot.
func DecodeSlot(b []byte) (Slot, error) {
	if len(b) != SlotLen {
		return Slot{}, fmt.Errorf("%w: slot of %d bytes, want %d", ErrBadLength, len(b), SlotLen)
	}
	s := Slot{Version: b[0], Opcode: b[1], Seq: Seq(binary.BigEndian.Uint32(b[SlotSeqOff:]))}
	switch {
	case s.Seq == 0 && s.Version == 0 && s.Opcode == 0 && b[2] == 0 && b[3] == 0:
		return s, ErrEmptySlot
	case s.Version != HERDVersion:
		return s, fmt.Errorf("%w: %d", ErrBadVersion, s.Version)
	case s.Opcode != OpGetTimestamp:
		return s, fmt.Errorf("%w: %d", ErrBadOpcode, s.Opcode)
	case b[2] != 0 || b[3] != 0:
		return s, fmt.Errorf("%w: reserved bytes 0x%02x%02x", ErrBadOpcode, b[2], b[3])
	case !s.Seq.Valid():
		return s, fmt.Errorf("%w: %d", ErrBadSeq, uint32(s.Seq))
	}
	return s, nil
}

// HERDImm is the immediate of a HERD answer: the window position of the
// slot it answers in the top PosBits bits and the slot's sequence number
// below.
type HERDImm uint32

// HERDAnswerImm encodes the immediate answering (pos, seq).
func HERDAnswerImm(pos int, s Seq) (HERDImm, error) {
	if pos < 0 || pos >= HERDMaxWindow {
		return 0, fmt.Errorf("%w: %d", ErrBadPos, pos)
	}
	if !s.Valid() {
		return 0, fmt.Errorf("%w: %d", ErrBadSeq, uint32(s))
	}
	return HERDImm(uint32(pos)<<SeqBits | uint32(s)), nil
}

// Pos returns the window position.
func (i HERDImm) Pos() int { return int(uint32(i) >> SeqBits) }

// Seq returns the echoed sequence number.
func (i HERDImm) Seq() Seq { return Seq(uint32(i) & SeqMask) }

func (i HERDImm) String() string {
	return fmt.Sprintf("imm:0x%08x{pos:%d %s}", uint32(i), i.Pos(), i.Seq())
}

// DecodeHERDAnswer checks an answer (immediate and payload, GRH area
// removed) and returns its position, sequence number and value.
func DecodeHERDAnswer(i HERDImm, payload []byte) (pos int, s Seq, v uint64, err error) {
	if len(payload) != HERDAnswerLen {
		return 0, 0, 0, fmt.Errorf("%w: answer carries %d bytes, want %d", ErrBadLength, len(payload), HERDAnswerLen)
	}
	if !i.Seq().Valid() {
		return 0, 0, 0, fmt.Errorf("%w: %s", ErrBadSeq, i)
	}
	return i.Pos(), i.Seq(), binary.BigEndian.Uint64(payload), nil
}

// SlotIndex returns the index of the slot of window position pos of the
// client QP whose slots start at base, in a region of n slots.
func SlotIndex(base, pos, n int) (int, error) {
	if base < 0 || pos < 0 || pos >= HERDMaxWindow || base+pos >= n {
		return 0, fmt.Errorf("%w: base %d pos %d in a region of %d slots", ErrBadPos, base, pos, n)
	}
	return base + pos, nil
}
