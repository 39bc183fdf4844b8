package spec

import (
	"fmt"
	"time"
)

// The timing assumptions the invariants rest on (PROTOCOL.md, "Assumptions").
// Client and server read them from here so that they agree.
const (
	// MaxPacketLifetime bounds how long a packet (request or answer) can
	// spend in the network, duplicates included: a packet not delivered
	// this long after it was sent is never delivered.
	MaxPacketLifetime = 2 * time.Millisecond
	// MaxResidence bounds how long the server holds a received request
	// before answering it. The server enforces it: a request it could not
	// answer in time (persistence stalled) is dropped and counted, never
	// answered late.
	MaxResidence = 4 * time.Millisecond
	// MaxAnswerDelay bounds the time from sending a request to the arrival
	// of the last answer it can ever produce.
	MaxAnswerDelay = 2*MaxPacketLifetime + MaxResidence
	// DefaultQuarantine is how long a client keeps a released tag unused.
	// A tag is released when answered or when its request times out; both
	// happen after the request was sent, so every answer to the previous
	// use has arrived (or never will) once the quarantine ends.
	DefaultQuarantine = MaxAnswerDelay
	// DefaultTimeout is how long a client waits for an answer before it
	// retransmits the request with a fresh tag.
	DefaultTimeout = 20 * time.Millisecond

	// GuessFreshness is how long a client trusts the high part it learned:
	// it sends NoGuess when its knowledge is older.
	GuessFreshness = time.Second
	// GuardPeriod is how often the server rebases its jump detector.
	GuardPeriod = 100 * time.Millisecond
	// JumpUnits is the largest advance of the served value within one
	// GuardPeriod that the server accepts without suspending
	// confirmations. See Guard.
	JumpUnits = uint64(1) << (2*LowBits - 4)
	// Holdoff is how long the server confirms no guess after it starts
	// and after it detects a jump: longer than any guess made from older
	// knowledge can live (GuessFreshness + MaxAnswerDelay).
	Holdoff = 2 * time.Second
)

// AliasSpan is the smallest advance of the value that can make a stale
// guess look right: the compared bits (value bits LowBits..2*LowBits-1)
// repeat every 2^(2*LowBits) units. With LowBits=20 that is 2^40 units:
// about 70 minutes of the hybrid format's physical clock, or 2^40 counter
// values.
const AliasSpan = uint64(1) << (2 * LowBits)

// guard periods a guess can span: its knowledge is at most GuessFreshness
// old, and it reaches the server within MaxAnswerDelay.
const guessSpanPeriods = int64((GuessFreshness+MaxAnswerDelay)/GuardPeriod) + 2

// The static argument of PROTOCOL.md: within the lifetime of a guess the
// value advances by less than AliasSpan, unless a jump suspended
// confirmations.
var _ = [1]struct{}{}[boolToInt(uint64(guessSpanPeriods)*JumpUnits < AliasSpan-(1<<LowBits))-1]

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Format is how the 64 bits of a value are laid out.
type Format uint8

// Formats.
const (
	// FormatHybrid: the top 46 bits are Unix milliseconds, the low 18 bits
	// a logical counter within the millisecond.
	FormatHybrid Format = iota + 1
	// FormatCounter: a plain counter.
	FormatCounter
)

// Hybrid layout.
const (
	HybridLogicalBits = 18
	HybridLogicalMask = 1<<HybridLogicalBits - 1
)

func (f Format) String() string {
	switch f {
	case FormatHybrid:
		return "hybrid"
	case FormatCounter:
		return "counter"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat parses a format name as String prints it.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "hybrid":
		return FormatHybrid, nil
	case "counter":
		return FormatCounter, nil
	}
	return 0, fmt.Errorf("spec: unknown format %q (want hybrid or counter)", s)
}

// HybridPhysical returns the physical part of a hybrid value.
func HybridPhysical(v uint64) time.Time { return time.UnixMilli(int64(v >> HybridLogicalBits)) }

// HybridLogical returns the logical part of a hybrid value.
func HybridLogical(v uint64) uint32 { return uint32(v & HybridLogicalMask) }

// HybridValue builds a hybrid value.
func HybridValue(ms int64, logical uint32) uint64 {
	return uint64(ms)<<HybridLogicalBits | uint64(logical&HybridLogicalMask)
}
