package client

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// At most GOMAXPROCS-1 goroutines spin without yielding; the others
// yield, and a stopped spin gives its place back. The spins count in a
// counter of the test's own, not in the process's (a client another test
// left may be spinning).
func TestTightSpinnersBounded(t *testing.T) {
	var tightSpinners atomic.Int32
	newSpin := func(mayTight bool) spin {
		s := newSpin(mayTight)
		s.count = &tightSpinners
		return s
	}
	for _, procs := range []int{1, 2, 4} {
		prev := runtime.GOMAXPROCS(procs)
		spins := make([]spin, procs+2)
		tight := 0
		for i := range spins {
			spins[i] = newSpin(true)
			if d := spins[i].at(10); d != 0 {
				t.Fatalf("GOMAXPROCS %d: a new spin is %v old, want 0", procs, d)
			}
			if spins[i].tight {
				tight++
			}
		}
		if want := procs - 1; tight != want || int(tightSpinners.Load()) != want {
			t.Errorf("GOMAXPROCS %d: %d tight spinners (counted %d), want %d", procs, tight, tightSpinners.Load(), want)
		}
		if d := spins[0].at(25); d != 15 {
			t.Errorf("GOMAXPROCS %d: spinning for %v at 25, want 15", procs, d)
		}
		if procs > 1 {
			// A stopped tight spinner frees its place for the next spin.
			spins[0].stop()
			s := newSpin(true)
			s.at(30)
			if !s.tight {
				t.Errorf("GOMAXPROCS %d: no tight place after a tight spinner stopped", procs)
			}
			s.stop()
		}
		// A spinner that may not spin tight never takes a place.
		y := newSpin(false)
		y.at(40)
		if y.tight {
			t.Errorf("GOMAXPROCS %d: the engine's spin took a tight place", procs)
		}
		y.stop()
		for i := range spins {
			spins[i].stop()
			spins[i].stop() // idempotent
		}
		if n := tightSpinners.Load(); n != 0 {
			t.Errorf("GOMAXPROCS %d: %d tight spinners after all stopped", procs, n)
		}
		runtime.GOMAXPROCS(prev)
	}
}

// TestNextRTT: one slow answer moves the moving average of round trips
// by an eighth of the average at most, so the calls after it still spin
// long; a lasting change moves it past shortRTT within a few dozen
// answers; the first answer sets it.
func TestNextRTT(t *testing.T) {
	if got := nextRTT(0, 120*time.Microsecond); got != 15*time.Microsecond {
		t.Fatalf("first answer: %v, want 15µs", got)
	}
	avg := 12 * time.Microsecond
	for range 100 {
		avg = nextRTT(avg, 12*time.Microsecond)
	}
	spiked := nextRTT(avg, 5*time.Millisecond)
	if spiked > avg+avg/8 || spiked <= avg {
		t.Fatalf("after one 5 ms answer: %v, from %v", spiked, avg)
	}
	if spinFor(spiked) != spinLong {
		t.Fatalf("after one slow answer the calls spin %v, want %v", spinFor(spiked), spinLong)
	}
	n := 0
	for avg = spiked; avg < shortRTT; n++ {
		avg = nextRTT(avg, 500*time.Microsecond)
	}
	if n > 40 {
		t.Fatalf("%d answers of 500µs to cross %v", n, shortRTT)
	}
	for range 200 {
		avg = nextRTT(avg, 500*time.Microsecond)
	}
	if avg < 450*time.Microsecond {
		t.Fatalf("after 200 answers of 500µs the average is %v", avg)
	}
}

// TestLoopSpinDeepPipeline: the engine goroutine spins as long as a
// lone caller would (spinFor) with few requests in flight, and at most
// spinDeep with a deep pipeline in flight, whose answers come in bursts.
func TestLoopSpinDeepPipeline(t *testing.T) {
	for _, c := range []struct {
		rtt      time.Duration
		inflight int
		want     time.Duration
	}{
		{10 * time.Microsecond, 0, spinLong},
		{10 * time.Microsecond, deepPipeline - 1, spinLong},
		{10 * time.Microsecond, deepPipeline, spinDeep},
		{time.Millisecond, deepPipeline - 1, spinShort},
		{time.Millisecond, 128, spinDeep},
	} {
		if got := loopSpinFor(c.rtt, c.inflight); got != c.want {
			t.Errorf("rtt %v, %d in flight: spin %v, want %v", c.rtt, c.inflight, got, c.want)
		}
	}
}
