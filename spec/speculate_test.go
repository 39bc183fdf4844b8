package spec

import (
	"math/rand/v2"
	"testing"
	"time"
)

// hybridAt is the hybrid value a server whose clock reads client time
// plus off serves at client time t (logical part 0).
func hybridAt(t, off time.Duration) uint64 {
	return HybridValue(int64((t+off)/time.Millisecond), 0)
}

// specSim drives a Speculator as a pipelined client does: a request sent
// every gap, served d0..d0+jitter later by a hybrid server, its answer
// seen as long again later (in order of arrival). It returns the misses
// (guess not the served high part) and the guesses above the served high
// part (predicted too early).
type specSim struct {
	gap, d0, jitter, off time.Duration
	stallFrom, stallFor  time.Duration // the server's clock stands still then
	predict              bool
}

type flight struct {
	sent, arrive time.Duration
	v            uint64
	high         uint64
}

func (c specSim) run(t *testing.T, dur time.Duration, rng *rand.Rand) (sent, misses, early int) {
	var s Speculator
	if c.predict {
		s.SetPeriod(HighPeriod(FormatHybrid))
	}
	serverAt := func(at time.Duration) uint64 {
		if at > c.stallFrom && c.stallFor > 0 {
			at = max(c.stallFrom, at-c.stallFor)
		}
		return hybridAt(at, c.off)
	}
	s.Learn(0, serverAt(0))
	var inflight []flight
	for now := time.Duration(0); now < dur; now += c.gap {
		// answers that arrived by now, oldest first
		k := 0
		for _, f := range inflight {
			if f.arrive > now {
				inflight[k] = f
				k++
				continue
			}
			s.Learn(f.arrive, f.v)
			s.Observe(f.sent, f.v)
		}
		inflight = inflight[:k]
		g, h := s.Guess(now)
		if g == NoGuess {
			t.Fatalf("%v: no guess from fresh knowledge", now)
		}
		if h < s.high || h > s.high+MaxPredictAhead {
			t.Fatalf("%v: guessed high %d outside [%d, %d+MaxPredictAhead]", now, h, s.high, s.high)
		}
		d := c.d0 + time.Duration(rng.Int64N(int64(c.jitter)+1))
		v := serverAt(now + d)
		sent++
		if h != v>>LowBits {
			misses++
		}
		if h > v>>LowBits {
			early++
		}
		inflight = append(inflight, flight{sent: now, arrive: now + 2*d, v: v})
	}
	return sent, misses, early
}

func TestSpeculatorPredicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		sim  specSim
		// factor: prediction misses at most 1/factor as often
		factor int
	}{
		{"serial", specSim{gap: 15 * time.Microsecond, d0: 5 * time.Microsecond, jitter: 2 * time.Microsecond, off: 1234567 * time.Microsecond}, 2},
		{"pipelined", specSim{gap: time.Microsecond, d0: 100 * time.Microsecond, jitter: 20 * time.Microsecond, off: 777 * time.Microsecond}, 8},
		{"pipelined-steady", specSim{gap: time.Microsecond, d0: 100 * time.Microsecond, off: 777 * time.Microsecond}, 50},
		{"sparse", specSim{gap: 9 * time.Millisecond, d0: 50 * time.Microsecond, jitter: 10 * time.Microsecond, off: 3 * time.Millisecond / 7}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, pred := tc.sim, tc.sim
			old.predict, pred.predict = false, true
			n, oldMiss, _ := old.run(t, 400*time.Millisecond, rand.New(rand.NewPCG(1, 2)))
			_, predMiss, early := pred.run(t, 400*time.Millisecond, rand.New(rand.NewPCG(1, 2)))
			t.Logf("%d requests: %d misses without prediction, %d with (%d early)", n, oldMiss, predMiss, early)
			// With a fixed serving delay the phase is never later than
			// the real one: no guess is ahead of the server.
			if tc.sim.jitter == 0 && early != 0 {
				t.Errorf("%d guesses above the served high part with a steady clock and delay", early)
			}
			// A rollover costs at most the requests sent within the
			// serving jitter of it (plus the drift allowance) once the
			// phase is learned: far fewer than without prediction, where
			// every request in flight at the rollover misses.
			if predMiss*tc.factor > oldMiss {
				t.Errorf("prediction missed %d times, without it %d", predMiss, oldMiss)
			}
		})
	}
}

// A server whose clock stalls (stepped back, the hybrid clock holding its
// physical part) makes predictions wrong for a while: they are only
// misses, the guess stays within MaxPredictAhead of the learned high part
// (run checks every guess), and once the clock runs again the phase is
// learned again.
func TestSpeculatorStall(t *testing.T) {
	sim := specSim{gap: 2 * time.Microsecond, d0: 20 * time.Microsecond, jitter: 4 * time.Microsecond,
		stallFrom: 100 * time.Millisecond, stallFor: 30 * time.Millisecond, predict: true}
	rng := rand.New(rand.NewPCG(3, 4))
	n, misses, early := sim.run(t, 300*time.Millisecond, rng)
	t.Logf("%d requests, %d misses (%d early)", n, misses, early)
	if early == 0 {
		t.Fatal("a stalled clock never made a prediction early: the test does not exercise the stall")
	}
	steady := specSim{gap: sim.gap, d0: sim.d0, jitter: sim.jitter, predict: true}
	_, base, _ := steady.run(t, 300*time.Millisecond, rand.New(rand.NewPCG(3, 4)))
	old := specSim{gap: sim.gap, d0: sim.d0, jitter: sim.jitter, stallFrom: sim.stallFrom, stallFor: sim.stallFor}
	_, oldMisses, _ := old.run(t, 300*time.Millisecond, rand.New(rand.NewPCG(3, 4)))
	t.Logf("steady clock: %d misses; stalled clock without prediction: %d", base, oldMisses)
	if misses > 3*oldMisses {
		t.Errorf("a stall cost %d misses with prediction, %d without", misses, oldMisses)
	}
}

// However far the phase says the high part has advanced, a guess is at
// most MaxPredictAhead above the learned one, and never below it.
func TestSpeculatorPredictionCapped(t *testing.T) {
	var s Speculator
	s.SetPeriod(time.Microsecond)
	v := uint64(0x1234_5678_9abc)
	s.Learn(0, v)
	s.Observe(0, v)
	s.Observe(time.Microsecond/2, v)
	_, h := s.Guess(GuessFreshness - 1)
	if want := v>>LowBits + MaxPredictAhead; h != want {
		t.Fatalf("guessed high 0x%x, want the cap 0x%x", h, want)
	}
	if g, _ := s.Guess(GuessFreshness); g != NoGuess {
		t.Fatalf("stale knowledge guessed %v", g)
	}
	// A guess whose compared bits are all ones is NoGuess.
	s = Speculator{}
	s.SetPeriod(4 * time.Millisecond)
	high := uint64(0x5_0000_0000) | LowMask - 1 // the next high part cannot be guessed
	s.Learn(0, high<<LowBits)
	s.Observe(0, high<<LowBits)
	if g, h := s.Guess(4*time.Millisecond + time.Microsecond); g != NoGuess || h != high+1 {
		t.Fatalf("guess %v high 0x%x, want NoGuess for 0x%x", g, h, high+1)
	}
}

// Aliasing: a guess is confirmed only when its compared bits equal the
// served high part's; for every served high part the protocol's bounds
// allow (at most 2^LowBits-1 above the learned one) and every guess the
// Speculator may make (at most MaxPredictAhead above it), equal compared
// bits mean equal high parts.
func TestPredictionCannotAlias(t *testing.T) {
	const maxAdvance = 1<<LowBits - 1 // the Guard's bound in high parts (assume.go)
	learned := uint64(0xabc) << LowBits
	for k := uint64(0); k <= MaxPredictAhead; k++ {
		guess := GuessOf(learned + k)
		for _, served := range []uint64{learned, learned + k - 1, learned + k + 1, learned + maxAdvance, learned + k + 1<<LowBits - 1} {
			if served < learned || served > learned+maxAdvance {
				continue
			}
			if Confirms(guess, served<<LowBits) && served != learned+k {
				t.Fatalf("guess of high %#x confirmed by served high %#x", learned+k, served)
			}
		}
	}
}
