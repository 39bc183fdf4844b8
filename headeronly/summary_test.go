package headeronly

import (
	"testing"
)

// Status's Summary takes no lock a Connect holds (s.mu, held while a
// Connect's receives are posted) and leaves out sessions_overrun, the
// walk of every session that Stats adds for the metrics.
func TestSummaryTakesNoConnectLock(t *testing.T) {
	s := newServer(t, &fakeOracle{})
	s.mu.Lock() // a Connect in progress
	st := s.Summary()
	s.mu.Unlock()
	for _, c := range st.Counters {
		if c.Name == "sessions_overrun" {
			t.Errorf("Summary reports %s: that walks every session", c.Name)
		}
	}
	if st.Sessions != 0 || len(st.Workers) != 2 {
		t.Errorf("Summary: %d sessions, %d workers; want 0 and 2", st.Sessions, len(st.Workers))
	}
	if _, ok := s.OverrunSessions(); ok {
		found := false
		for _, c := range s.Stats().Counters {
			found = found || c.Name == "sessions_overrun"
		}
		if !found {
			t.Error("Stats has no sessions_overrun gauge (the metrics need it)")
		}
	}
}
