package modes

import (
	"regexp"
	"slices"
	"testing"

	"github.com/seqd/seqd/spec"
)

// TestRegistryFollowsTable: every mode of spec.ModeTable has a factory
// (a mode listed there but not run would drop silently out of All, and so
// out of HA's list, seqd -mode and the monitoring tests), and nothing
// outside the table is registered; every mode names its metrics.
func TestRegistryFollowsTable(t *testing.T) {
	if !slices.Equal(All, spec.Modes) {
		t.Errorf("registered modes %q, the table's %q", All, spec.Modes)
	}
	for m := range registry {
		if _, ok := spec.Facts(m); !ok {
			t.Errorf("registered mode %q is not in spec.ModeTable", m)
		}
	}
	prefix := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	seen := map[string]string{}
	for _, f := range spec.ModeTable {
		if !prefix.MatchString(f.Metrics) {
			t.Errorf("mode %s: metrics prefix %q", f.Name, f.Metrics)
		}
		if other, dup := seen[f.Metrics]; dup {
			t.Errorf("modes %s and %s share the metrics prefix %q", other, f.Name, f.Metrics)
		}
		seen[f.Metrics] = f.Name
		if f.Help == "" {
			t.Errorf("mode %s has no help text", f.Name)
		}
	}
}
