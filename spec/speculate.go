package spec

import "time"

// Speculator is the client's knowledge of the server's high part (the
// value above its low LowBits bits). It is pure: time is passed in.
type Speculator struct {
	high    uint64
	learned time.Duration
	valid   bool
}

// Guess returns what to send with a request at now, and the high part the
// answer must be completed with if the server confirms. It is NoGuess when
// nothing was learned yet or the knowledge is older than GuessFreshness.
func (s *Speculator) Guess(now time.Duration) (Guess, uint64) {
	if !s.valid || now-s.learned >= GuessFreshness {
		return NoGuess, 0
	}
	return GuessOf(s.high), s.high
}

// Learn records a value the server served (a full value, or a confirmed
// guess) seen at now. Knowledge only moves forward.
func (s *Speculator) Learn(now time.Duration, v uint64) {
	h := v >> LowBits
	switch {
	case !s.valid || h > s.high:
		s.high, s.learned, s.valid = h, now, true
	case h == s.high && now > s.learned:
		s.learned = now
	}
}

// Forget drops the knowledge (after a reconnect).
func (s *Speculator) Forget() { *s = Speculator{} }

// Guard is the server's defence against aliasing (PROTOCOL.md): it
// suspends confirmations for Holdoff after the server starts and after
// the served value jumps by more than JumpUnits within a GuardPeriod,
// so that a guess never spans AliasSpan. It is pure; one per worker.
type Guard struct {
	hold   time.Duration // no confirmations before this
	base   uint64
	baseAt time.Duration
	jumps  uint64
}

// NewGuard returns a Guard for a server started at now: confirmations are
// suspended until now+Holdoff, because the clock may have jumped while the
// server was down.
func NewGuard(now time.Duration) Guard {
	return Guard{hold: now + Holdoff, baseAt: now}
}

// Observe records that values up to v are being served at now, and
// reports whether guesses may be confirmed.
func (g *Guard) Observe(now time.Duration, v uint64) bool {
	if g.base == 0 {
		g.base, g.baseAt = v, now
	}
	if v > g.base && v-g.base > JumpUnits {
		g.jumps++
		g.hold = now + Holdoff
		g.base, g.baseAt = v, now
	} else if now-g.baseAt >= GuardPeriod {
		g.base, g.baseAt = v, now
	}
	return now >= g.hold
}

// Jumps counts the jumps detected.
func (g *Guard) Jumps() uint64 { return g.jumps }
