package spec

import "time"

// Speculator is the client's knowledge of the server's high part (the
// value above its low LowBits bits). It is pure: time is passed in.
//
// When the high part advances with time (the hybrid format: every
// HighPeriod), the Speculator also predicts the advance: it keeps the
// interval of send times (lo, hi] in which the high part base began to be
// served, narrowed by every answer (Observe), and guesses for a request
// sent at now the high part it will be served with if the advance came as
// late as the interval allows. PROTOCOL.md ("Predicting the rollover")
// argues that this keeps the aliasing bound.
type Speculator struct {
	high    uint64
	learned time.Duration
	valid   bool

	period time.Duration // SetPeriod; 0: no prediction
	phased bool          // lo, hi and base hold an estimate
	base   uint64        // the high part the phase refers to
	lo, hi time.Duration // the high part base began at a send time in (lo, hi]
	obsAt  time.Duration // the send time lo and hi were last widened to
}

// Guess returns what to send with a request at now, and the high part the
// answer must be completed with if the server confirms. It is NoGuess when
// nothing was learned yet or the knowledge is older than GuessFreshness.
// With a period set, the high part guessed is the one a request sent at
// now is served with if the high part advances at the latest moment the
// answers observed allow; never more than MaxPredictAhead above the one
// learned.
func (s *Speculator) Guess(now time.Duration) (Guess, uint64) {
	if !s.valid || now-s.learned >= GuessFreshness {
		return NoGuess, 0
	}
	h := s.high
	if s.phased {
		hi := s.hi + drift(now-s.obsAt)
		if now > hi {
			if p := s.base + uint64((now-hi)/s.period); p > h {
				h = min(p, s.high+MaxPredictAhead)
			}
		}
	}
	return GuessOf(h), h
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

// SetPeriod sets how often the high part advances on its own
// (HighPeriod of the server's format; 0: it does not, and nothing is
// predicted). A new period drops the phase learned.
func (s *Speculator) SetPeriod(p time.Duration) {
	if p != s.period {
		s.period, s.phased = max(p, 0), false
	}
}

// Period is what SetPeriod set.
func (s *Speculator) Period() time.Duration { return s.period }

// Observe records that a request sent at sent (the client's clock) was
// served with v, and narrows the phase of the high part's advance. An
// observation that contradicts the phase (the server's clock stepped or
// stalled, another server answers) starts it again from this one.
func (s *Speculator) Observe(sent time.Duration, v uint64) {
	if s.period <= 0 {
		return
	}
	h := v >> LowBits
	if s.phased {
		if d := sent - s.obsAt; d > 0 {
			w := drift(d)
			s.lo, s.hi, s.obsAt = s.lo-w, s.hi+w, sent
		}
		// Keep the phase relative to a nearby high part.
		if h > s.base && h-s.base < maxPhaseSpan {
			d := time.Duration(h-s.base) * s.period
			s.lo, s.hi, s.base = s.lo+d, s.hi+d, h
		}
		if k := int64(h) - int64(s.base); k <= 0 && k > -maxPhaseSpan {
			// sent is in [begin(h), begin(h+1)): begin(base) is in
			// (sent-(k+1)P, sent-kP].
			lo := sent - time.Duration(k+1)*s.period
			hi := sent - time.Duration(k)*s.period
			nlo, nhi := max(s.lo, lo), min(s.hi, hi)
			if nlo < nhi {
				s.lo, s.hi = nlo, nhi
				return
			}
			// This answer says the high part advanced sooner than
			// earlier ones did, by less than a quarter period: the
			// serving delay varies (a request sent later served
			// sooner). Keep the middle of the disagreement. (One that
			// says it advanced later starts the phase again: the
			// server's clock may have stalled, and guessing ahead of it
			// would miss every time.)
			if hi <= s.lo && nlo-nhi < s.period/4 {
				m := nhi + (nlo-nhi)/2
				s.lo, s.hi = m-1, m
				return
			}
		}
	}
	s.phased, s.base, s.lo, s.hi, s.obsAt = true, h, sent-s.period, sent, sent
}

// maxPhaseSpan bounds, in high parts, how far apart an observation and the
// phase may be and still be compared (beyond it the phase starts again).
const maxPhaseSpan = 1 << 20

// drift is how far the server's clock may drift from the client's in d.
func drift(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d / (1_000_000 / PredictDriftPPM)
}

// Forget drops the knowledge (after a reconnect); the period stays.
func (s *Speculator) Forget() { *s = Speculator{period: s.period} }

// HighPeriod is how often the high part of a value of format f advances
// with the clock: in hybrid every 2^(LowBits-HybridLogicalBits) ms (4 ms).
// It is 0 for the counter format, whose values advance with the load.
func HighPeriod(f Format) time.Duration {
	if f == FormatHybrid {
		return time.Millisecond << (LowBits - HybridLogicalBits)
	}
	return 0
}

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
