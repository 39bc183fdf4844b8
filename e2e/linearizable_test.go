package e2e

import (
	"testing"
	"time"
)

// TestLinearizable: porcupine accepts a history whose concurrent calls
// may be ordered by value, and rejects one where a call that started
// after another returned got a smaller value, as Check does.
func TestLinearizable(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		calls []Call
		ok    bool
	}{
		{"sequential", []Call{{1, 0, ms, 1}, {2, 2 * ms, 3 * ms, 2}}, true},
		{"concurrent any order", []Call{{1, 0, 3 * ms, 5}, {2, ms, 2 * ms, 4}}, true},
		{"real-time order broken", []Call{{1, 0, ms, 5}, {2, 2 * ms, 3 * ms, 4}}, false},
		{"duplicate", []Call{{1, 0, 3 * ms, 4}, {2, ms, 2 * ms, 4}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v Verifier
			for _, c := range tc.calls {
				v.Record(c)
			}
			err := v.Linearizable(10 * time.Second)
			if (err == nil) != tc.ok {
				t.Fatalf("Linearizable = %v, want ok %v", err, tc.ok)
			}
			if (v.Check() == nil) != tc.ok {
				t.Fatalf("Check = %v, disagrees with porcupine", v.Check())
			}
		})
	}
}
