package rfp

import (
	"testing"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/dataplane/dataplanetest"
	"github.com/seqd/seqd/spec"
)

// TestConformance runs the mode conformance suite (dataplanetest).
func TestConformance(t *testing.T) {
	dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeRFP, Start: Start, State: state})
}

// state: released sessions whose QPs, blocks and PD await the workers'
// sweep, and the client QPs held.
func state(m dataplane.Mode) map[string]int {
	s := m.(*Server)
	_, released := s.held()
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]int{"released sessions not freed": released, "client QPs held": len(s.holders)}
}
