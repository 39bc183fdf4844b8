package erpc

import (
	"testing"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/dataplane/dataplanetest"
	"github.com/seqd/seqd/spec"
)

// TestConformance runs the mode conformance suite (dataplanetest).
func TestConformance(t *testing.T) {
	dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeERPC, Start: Start, State: state})
}

// state is what the workers keep per session endpoint: peer-table
// entries and credits.
func state(m dataplane.Mode) map[string]int {
	s := m.(*Server)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := map[string]int{"credits": s.credits}
	for _, w := range s.Workers {
		st["peers"] += w.peers.Load().Len()
		st["worker_credits"] += w.credits
	}
	return st
}
