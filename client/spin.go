package client

import (
	"runtime"
	"sync/atomic"
	"time"
)

// tightSpinners counts the goroutines of this process that busy-poll a
// client's CQ without yielding (spin).
var tightSpinners atomic.Int32

// spin is the busy-poll of one goroutine (a lone caller driving the
// engine, or the engine goroutine) between finding no answer and
// blocking in the CQ's Wait.
//
// runtime.Gosched on every pause puts the goroutine on the global run
// queue and wakes an idle thread to look for work (wakep): on a
// two-core machine that thread lands on the server's or another
// client's core, and the goroutine migrates between threads, once per
// pause. So a lone caller, which waits for its own answer, polls
// without yielding while that leaves a processor (a P) for the rest of
// the process: at most GOMAXPROCS-1 goroutines of the process spin
// tight at once. The others yield on every pause, as hundreds of
// clients in one process must, or they starve one another until the
// runtime preempts them (10 ms each). The engine goroutine always
// yields: the callers its answers wake then run on its P, where a tight
// spin would make the runtime wake another thread to run them (the
// pipelined benchmark lost 5 % of its throughput that way).
type spin struct {
	since    time.Duration // when the spin began; -1: not spinning
	mayTight bool          // the spinner may poll without yielding
	tight    bool          // counted in *count
	count    *atomic.Int32 // tightSpinners (tests: their own)
}

// newSpin returns a spin that polls without yielding when mayTight and
// the process has room for it.
func newSpin(mayTight bool) spin {
	return spin{since: -1, mayTight: mayTight, count: &tightSpinners}
}

// at returns how long the goroutine has been spinning at now, starting
// the spin if it is not spinning.
func (s *spin) at(now time.Duration) time.Duration {
	if s.since < 0 {
		s.since = now
		if !s.mayTight {
			return 0
		}
		if n := s.count.Add(1); int(n) < runtime.GOMAXPROCS(0) {
			s.tight = true
		} else {
			s.count.Add(-1)
		}
	}
	return now - s.since
}

// pause is one pause of the spin between polls.
func (s *spin) pause() {
	if !s.tight {
		runtime.Gosched()
	}
}

// stop ends the spin (work was found, or the goroutine blocks or
// leaves).
func (s *spin) stop() {
	if s.tight {
		s.count.Add(-1)
		s.tight = false
	}
	s.since = -1
}
