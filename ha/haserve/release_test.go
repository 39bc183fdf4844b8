package haserve

import (
	"testing"
	"time"
)

// Held Status calls released together are spread over a moment that
// grows with their number, at most maxReleaseSpread.
func TestReleaseSpread(t *testing.T) {
	for _, c := range []struct {
		held int
		u    float64
		want time.Duration
	}{
		{1, 0.5, 100 * time.Microsecond},
		{10, 0, 0},
		{10, 0.5, time.Millisecond},
		{1000, 0.5, 100 * time.Millisecond},
		{1000, 0.999, 199800 * time.Microsecond},
		{100000, 0.5, 100 * time.Millisecond},
	} {
		if got := releaseSpread(c.held, c.u); got != c.want {
			t.Errorf("releaseSpread(%d, %v) = %v, want %v", c.held, c.u, got, c.want)
		}
	}
}
