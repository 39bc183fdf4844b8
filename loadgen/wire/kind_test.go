//go:build linux

package wire

import (
	"errors"
	"testing"

	"github.com/seqd/seqd/spec"
)

// TestKindOfFollowsTable (issue 28): the modes Admit speaks are exactly
// the table's wire modes (spec.ModeFacts.Wire), which -engine wire checks
// and its help text lists.
func TestKindOfFollowsTable(t *testing.T) {
	for _, f := range spec.ModeTable {
		_, err := kindOf(f.Name)
		if f.Wire && err != nil {
			t.Errorf("mode %s: the table says the generator speaks it, kindOf: %v", f.Name, err)
		}
		if !f.Wire && !errors.Is(err, ErrAdmit) {
			t.Errorf("mode %s: the table says the generator does not speak it, kindOf: %v", f.Name, err)
		}
	}
	if len(spec.WireModes()) == 0 {
		t.Fatal("the table names no wire mode")
	}
}
