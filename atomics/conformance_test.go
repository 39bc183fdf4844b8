package atomics

import (
	"testing"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/dataplane/dataplanetest"
	"github.com/seqd/seqd/spec"
)

// TestConformance runs the mode conformance suite (dataplanetest).
func TestConformance(t *testing.T) {
	dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeAtomics, Start: Start, State: state})
}

// state is the client QPs the server holds connections to.
func state(m dataplane.Mode) map[string]int {
	s := m.(*Server)
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]int{"qps": s.nqps}
}
