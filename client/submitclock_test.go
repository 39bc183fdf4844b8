package client

import (
	"testing"
	"time"
)

// TestSubmitClock: a request submitted while the engine goroutine polls
// is born at the reading its latest step began with (no clock read); one
// submitted while the engine idles, sleeps or reconnects (no reading
// published) is born at the clock. Either way no later than the Submit.
func TestSubmitClock(t *testing.T) {
	c := &Client{start: time.Now().Add(-time.Hour)}
	c.sub.clock.Store(int64(time.Minute))
	if got := c.submitClock(); got != time.Minute {
		t.Fatalf("engine polling: born at %v, want the step's reading %v", got, time.Minute)
	}
	c.sub.clock.Store(0)
	before := c.now()
	got := c.submitClock()
	if after := c.now(); got < before || got > after {
		t.Fatalf("engine not polling: born at %v, want the clock, in [%v, %v]", got, before, after)
	}
}
