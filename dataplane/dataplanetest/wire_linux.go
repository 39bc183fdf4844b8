//go:build linux

package dataplanetest

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/loadgen/wire"
)

// testWire: loadgen's wire generator (-engine wire), which forges the
// mode's packets itself from many source addresses, gets verified
// answers, for every mode whose facts say it speaks the mode
// (spec.ModeFacts.Wire); skipped for the others.
func testWire(t testing.TB, h *Harness) {
	if !h.facts().Wire {
		t.Skipf("dataplanetest: the wire generator does not speak %s (spec.ModeFacts.Wire)", h.Name)
	}
	in := h.start(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := admintest.Client(ctx, t, h.serveAdmin(t, in))
	g, err := wire.New(wire.Config{Flows: 4, Window: 8, Keep: 1 << 16})
	if err != nil {
		t.Fatalf("wire.New: %v", err)
	}
	defer g.Close()
	ss, err := wire.Admit(ctx, adm, g, h.Name, 0, "conformance-wire")
	if err != nil {
		t.Fatalf("wire.Admit: %v", err)
	}
	defer ss.Close(ctx)
	for range 20 {
		res, err := g.Run(ctx, 50*time.Millisecond, 200*time.Millisecond, nil)
		if err != nil {
			t.Fatalf("wire run: %v (%+v)", err, res)
		}
		if res.Forged != 0 || res.BadICRC != 0 || res.Malformed != 0 || res.Violations() != 0 {
			t.Fatalf("wire generator: answers not all verified: %+v %q", res.Stats, res.Examples)
		}
		if res.Measured > 0 {
			t.Logf("wire generator: %d answers verified", res.Answers)
			return
		}
	}
	t.Fatal("wire generator: no run measured an answer")
}
