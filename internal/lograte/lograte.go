// Package lograte rate-limits repeated log lines: a warning that a
// failing dependency makes on every request (seqd-pd wrote 8,442 in 5 s)
// is logged once per interval and key, and the next line it lets through
// says how many it suppressed.
package lograte

import (
	"sync"
	"time"
)

// Limiter lets one line per key through per interval.
type Limiter struct {
	every time.Duration
	now   func() time.Time // time.Now; tests replace it

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	last       time.Time
	suppressed uint64
}

// New returns a Limiter that lets one line per key through every every.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, now: time.Now, keys: map[string]*state{}}
}

// SetClock replaces the Limiter's clock (tests).
func (l *Limiter) SetClock(now func() time.Time) { l.now = now }

// Allow reports whether a line for key may be logged now and, when it
// may, how many lines for key were suppressed since the last one let
// through (log it as "suppressed").
func (l *Limiter) Allow(key string) (ok bool, suppressed uint64) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		l.keys[key] = &state{last: now}
		return true, 0
	}
	if now.Sub(s.last) < l.every {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return true, n
}
