//go:build linux

package loadgen

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/loadgen/inprocess"
)

// TestRunWire runs -engine wire against an in-process seqd (no floors,
// no Redis: those run in processes of their own) and checks that every
// flow count is measured, verified and reported, each in two slices.
func TestRunWire(t *testing.T) {
	c := Config{Engine: EngineWire, Spawn: true, SeqdBinary: InProcess, InProcess: inprocess.Spawn, Flows: []int{1, 8}, Slices: 2,
		Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond, ServerCore: -1, NoFloors: true, NoRedis: true}
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Wire) != 2 {
		t.Fatalf("%d wire results, want 2: %+v", len(rep.Wire), rep.Wire)
	}
	for _, x := range rep.Wire {
		// Throughput is asserted in loadgen/wire (a loaded machine may
		// starve the in-process server for a whole short run).
		if x.Server != "seqd" || x.Mode != "spec-s0" || x.Violations != 0 {
			t.Fatalf("result %+v", x)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "seqd_mops=") || !strings.HasSuffix(strings.TrimSpace(b.String()), "flows=8") {
		t.Fatalf("table does not end with the bench lines:\n%s", b.String())
	}
}
