package darpc

import (
	"testing"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/dataplane/dataplanetest"
	"github.com/seqd/seqd/spec"
)

// TestConformance runs the mode conformance suite (dataplanetest).
func TestConformance(t *testing.T) {
	dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeDaRPC, Start: Start, State: state})
}

// state: the connections, free connection slots and CQ budget of the
// workers, and the client QPs held.
func state(m dataplane.Mode) map[string]int {
	s := m.(*Server)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.Workers {
		w.reclaim() // what Admit and Release do: frees the connections no sweep can see
	}
	st := map[string]int{"connections": s.nconns, "client QPs held": len(s.holders)}
	for _, w := range s.Workers {
		st["worker connections"] += w.nconns
		st["free slots"] += len(w.free)
		st["CQ entries used"] += w.cqUsed
	}
	return st
}
