package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ProtocolVersion is the Spec-S0 wire protocol version this package
// describes. Connect carries it both ways.
const ProtocolVersion = 2

// Layout of the 32-bit immediate of every Spec-S0 packet (requests and
// answers alike): a TagBits-bit tag on top, a LowBits-bit field below.
//
//	 31        20 19                 0
//	+------------+--------------------+
//	|    tag     |  guess / low part  |
//	+------------+--------------------+
const (
	TagBits  = 12
	LowBits  = 32 - TagBits // 20
	HighBits = 64 - LowBits // 44: the part of a value the client speculates

	// NumTags is the size of the tag space of one client queue pair.
	NumTags = 1 << TagBits
	// LowMask masks the low field of an immediate (and of a value).
	LowMask = 1<<LowBits - 1
	// NoGuess is the reserved guess that asks the server for the full
	// value. A high part whose low LowBits bits equal NoGuess is never
	// confirmed, so a client whose knowledge happens to end in those bits
	// simply gets the full value.
	NoGuess Guess = LowMask
)

// Payload sizes of the two kinds of answer, and of a request.
const (
	RequestLen = 0 // requests are header-only
	ConfirmLen = 0 // a confirmed guess is header-only
	FullLen    = 8 // a miss carries the whole value, big endian
)

// Errors of the decoders. They are wrapped with what was wrong.
var (
	ErrBadLength = errors.New("spec: bad payload length")
	ErrBadTag    = errors.New("spec: tag out of range")
	ErrBadGuess  = errors.New("spec: guess out of range")
	ErrNoImm     = errors.New("spec: packet carries no immediate")
	ErrMismatch  = errors.New("spec: full value disagrees with its immediate")
)

// Tag names one outstanding request of one client queue pair. Answers
// carry the tag of the request they answer.
type Tag uint16

// Valid reports whether t fits in TagBits.
func (t Tag) Valid() bool { return t < NumTags }

func (t Tag) String() string { return fmt.Sprintf("tag:%d", uint16(t)) }

// Guess is the client's speculation: the low LowBits bits of the high part
// (value >> LowBits) it expects, or NoGuess.
type Guess uint32

func (g Guess) String() string {
	if g == NoGuess {
		return "guess:none"
	}
	return fmt.Sprintf("guess:0x%05x", uint32(g))
}

// GuessOf returns the guess for a known high part.
func GuessOf(high uint64) Guess { return Guess(high & LowMask) }

// Imm is a Spec-S0 immediate in host byte order.
type Imm uint32

// Tag returns the tag field.
func (i Imm) Tag() Tag { return Tag(uint32(i) >> LowBits) }

// Low returns the low field: the guess of a request, the low part of the
// value in an answer.
func (i Imm) Low() uint32 { return uint32(i) & LowMask }

func (i Imm) String() string {
	return fmt.Sprintf("imm:0x%08x{%s low:0x%05x}", uint32(i), i.Tag(), i.Low())
}

// RequestImm encodes a request's immediate. It returns ErrBadTag or
// ErrBadGuess for values outside their fields.
func RequestImm(t Tag, g Guess) (Imm, error) {
	if !t.Valid() {
		return 0, fmt.Errorf("%w: %d", ErrBadTag, t)
	}
	if g > NoGuess {
		return 0, fmt.Errorf("%w: 0x%x", ErrBadGuess, uint32(g))
	}
	return Imm(uint32(t)<<LowBits | uint32(g)), nil
}

// MustRequestImm is RequestImm for arguments known to be in range (a Tag
// from a Window, a Guess from GuessOf); out-of-range bits are masked off.
func MustRequestImm(t Tag, g Guess) Imm {
	return Imm((uint32(t)&(NumTags-1))<<LowBits | uint32(g)&LowMask)
}

// DecodeRequest splits a request immediate. Every 32-bit immediate is a
// well-formed request; the payload length is checked by the caller with
// CheckRequestLen.
func DecodeRequest(i Imm) (Tag, Guess) { return i.Tag(), Guess(i.Low()) }

// CheckRequestLen checks the payload length of a request (the received
// byte count minus the GRH area).
func CheckRequestLen(n int) error {
	if n != RequestLen {
		return badRequestLen(n) // out of line: the check inlines on the worker's path
	}
	return nil
}

func badRequestLen(n int) error {
	return fmt.Errorf("%w: request carries %d bytes, want %d", ErrBadLength, n, RequestLen)
}

// AnswerImm encodes the immediate of an answer to tag for value v: the
// tag and the low LowBits bits of v.
func AnswerImm(t Tag, v uint64) Imm {
	return Imm((uint32(t)&(NumTags-1))<<LowBits | uint32(v)&LowMask)
}

// Confirms reports whether the server may answer a request guessing g for
// value v with a header-only confirmation: the guess must equal the low
// LowBits bits of v's high part and must not be NoGuess.
func Confirms(g Guess, v uint64) bool {
	return g != NoGuess && g == GuessOf(v>>LowBits)
}

// PutFull writes the 8-byte payload of a miss answer.
func PutFull(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

// DecodeAnswer returns the value an answer carries. payload is the received
// payload (GRH area removed): empty for a confirmation, whose value is
// high<<LowBits | low, or FullLen bytes holding the whole value, whose low
// bits must agree with the immediate. full reports which it was.
func DecodeAnswer(i Imm, payload []byte, high uint64) (v uint64, full bool, err error) {
	switch len(payload) {
	case ConfirmLen:
		if high >= 1<<HighBits {
			return 0, false, fmt.Errorf("%w: high part 0x%x above %d bits", ErrBadGuess, high, HighBits)
		}
		return high<<LowBits | uint64(i.Low()), false, nil
	case FullLen:
		v = binary.BigEndian.Uint64(payload)
		if uint32(v)&LowMask != i.Low() {
			return 0, true, fmt.Errorf("%w: value 0x%x, %s", ErrMismatch, v, i)
		}
		return v, true, nil
	}
	return 0, false, fmt.Errorf("%w: answer carries %d bytes, want %d or %d", ErrBadLength, len(payload), ConfirmLen, FullLen)
}
