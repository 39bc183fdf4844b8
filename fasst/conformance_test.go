package fasst

import (
	"testing"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/dataplane/dataplanetest"
	"github.com/seqd/seqd/spec"
)

// TestConformance runs the mode conformance suite (dataplanetest).
func TestConformance(t *testing.T) {
	dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeFaSST, Start: Start, State: state})
}

// state is what the workers keep per client: peer-table entries and
// receive budget.
func state(m dataplane.Mode) map[string]int {
	s := m.(*Server)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := map[string]int{}
	for _, w := range s.Workers {
		st["peers"] += w.peers.Load().Len()
		st["budget"] += w.budget
	}
	return st
}
