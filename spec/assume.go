package spec

import (
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

	// MaxPredictAhead caps how many high parts above the one it learned
	// a client's predicted guess may be (Speculator.Guess). Knowledge
	// lives GuessFreshness, in which the hybrid high part advances
	// GuessFreshness/HighPeriod = 250 times.
	MaxPredictAhead = 256
	// PredictDriftPPM is how fast, in parts per million, the client
	// assumes the server's clock may drift from its own when it predicts
	// the high part's advance: the phase it learned widens by this much
	// of the time since. A faster drift costs misses, never correctness.
	PredictDriftPPM = 100
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

// The prediction's argument (PROTOCOL.md, "Predicting the rollover"): a
// predicted guess is at most MaxPredictAhead above the learned high part,
// so the served high part minus the guessed one lies in
// (-2^LowBits, 2^LowBits) and equal compared bits mean equal high parts.
var _ = [1]struct{}{}[boolToInt(MaxPredictAhead < 1<<LowBits && 1_000_000%PredictDriftPPM == 0)-1]

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
