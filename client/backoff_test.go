package client

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestNextBackoff(t *testing.T) {
	const base, limit = 5 * time.Millisecond, 100 * time.Millisecond
	for _, tc := range []struct {
		prev   time.Duration
		u      float64
		want   time.Duration
		reason string
	}{
		{0, 0, base, "first pause, lowest pick: base"},
		{0, 0.5, 10 * time.Millisecond, "first pause: between base and 3×base"},
		{20 * time.Millisecond, 0.5, 32500 * time.Microsecond, "between base and 3×prev"},
		{80 * time.Millisecond, 0.5, 52500 * time.Microsecond, "3×prev above the cap: between base and limit"},
		{limit, 0, base, "even at the cap a pick may be short"},
	} {
		if got := nextBackoff(tc.prev, base, limit, tc.u); got != tc.want {
			t.Errorf("nextBackoff(%v, u=%v) = %v, want %v (%s)", tc.prev, tc.u, got, tc.want, tc.reason)
		}
	}
	if got := nextBackoff(0, limit, base, 0.7); got != base {
		t.Errorf("base above limit: %v, want the limit %v", got, base)
	}
}

// Clients failing in step draw different pauses: after a few rounds the
// next reconnects of 1000 clients are spread over the window, none
// outside [base, limit].
func TestNextBackoffSpreads(t *testing.T) {
	const base, limit = 5 * time.Millisecond, 100 * time.Millisecond
	r := rand.New(rand.NewPCG(1, 2))
	pauses := make([]time.Duration, 1000)
	buckets := map[time.Duration]int{}
	for round := range 6 {
		for i := range pauses {
			pauses[i] = nextBackoff(pauses[i], base, limit, r.Float64())
			if pauses[i] < base || pauses[i] > limit {
				t.Fatalf("round %d: pause %v outside [%v, %v]", round, pauses[i], base, limit)
			}
		}
	}
	for _, p := range pauses {
		buckets[p/(10*time.Millisecond)]++
	}
	// Ten 10ms buckets over [0, 100ms]: no bucket holds most clients.
	for b, n := range buckets {
		if n > len(pauses)/3 {
			t.Errorf("%d of %d clients pause %v..%v: not spread", n, len(pauses), b*10*time.Millisecond, (b+1)*10*time.Millisecond)
		}
	}
	if len(buckets) < 5 {
		t.Errorf("pauses fall in %d buckets of 10ms, want at least 5", len(buckets))
	}
}
