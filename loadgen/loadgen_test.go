package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seqd/seqd/loadgen/inprocess"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestQPsFor: -qps wins; by default Spec-S0 gets one QP per 16
// outstanding requests (at least 4, at most 64) and other modes 4; never
// more QPs than the window.
func TestQPsFor(t *testing.T) {
	for _, tc := range []struct {
		qps    int
		mode   string
		window int
		want   int
	}{
		{0, "spec-s0", 64, 4}, {0, "spec-s0", 256, 16}, {0, "spec-s0", 1 << 16, 64}, {0, "spec-s0", 2, 2},
		{0, "herd", 256, 4}, {0, "atomics", 1, 1}, {8, "spec-s0", 1024, 8}, {8, "herd", 3, 3},
	} {
		c := Config{QPs: tc.qps}
		if got := c.QPsFor(tc.mode, tc.window); got != tc.want {
			t.Errorf("QPs %d, %s, window %d: %d QPs, want %d", tc.qps, tc.mode, tc.window, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"spawn ignores admin", Config{Spawn: true, Admin: "x"}, true},
		{"bad admin", Config{Admin: "x"}, false},
		{"clients", Config{Clients: -1}, false},
		{"qps", Config{QPs: 65}, false},
		{"negative qps", Config{QPs: -1}, false},
		{"window below qps: uses fewer QPs", Config{QPs: 4, Window: 3}, true},
		{"negative window", Config{Window: -1}, false},
		{"window too large", Config{Window: 1 << 20}, false},
		{"sweep window", Config{SweepWindow: []int{1, 0}}, false},
		{"sweep clients", Config{SweepClients: []int{300}}, false},
		{"mode with comma", Config{Modes: []string{"a,b"}}, false},
		{"cores", Config{Cores: []int{-2}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	c := Config{SweepClients: []int{1, 2}, SweepWindow: []int{4, 8}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.Points(); !slices.Equal(got, []Point{{1, 4}, {1, 8}, {2, 4}, {2, 8}}) {
		t.Fatalf("points %v", got)
	}
}

// TestRunSpawned is a short real run: in-process seqd, Spec-S0, with the
// verifier on. It checks the JSON shape scripts rely on and that no
// timestamp broke a promise.
func TestRunSpawned(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seqd and load for about two seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, Config{Spawn: true, SeqdBinary: InProcess, InProcess: inprocess.Spawn, Modes: []string{"spec-s0"}, Clients: 2, Window: 16,
		Duration: time.Second, Warmup: 200 * time.Millisecond, Echo: 200 * time.Millisecond, Verify: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(top)); !slices.Equal(got, []string{"echo_floor_ops", "params", "results", "violations"}) {
		t.Fatalf("top-level keys %v", got)
	}
	var doc struct {
		Results      []map[string]any `json:"results"`
		EchoFloorOps float64          `json:"echo_floor_ops"`
		Violations   int              `json:"violations"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := []string{"avg_batch", "clients", "drops", "max_ts", "max_us", "min_ts", "mode", "p50_us", "p999_us", "p99_us",
		"retransmits", "spec_misses", "throughput_ops", "window"}
	if len(doc.Results) != 1 {
		t.Fatalf("%d results", len(doc.Results))
	}
	if got := slices.Sorted(maps.Keys(doc.Results[0])); !slices.Equal(got, want) {
		t.Fatalf("result keys %v, want %v", got, want)
	}
	res := rep.Results[0]
	if res.Mode != "spec-s0" || res.Clients != 2 || res.Window != 16 || res.ThroughputOps <= 0 || res.P50us <= 0 ||
		res.MinTS == 0 || res.MaxTS <= res.MinTS || doc.EchoFloorOps <= 0 {
		t.Fatalf("implausible result %+v, echo %v", res, doc.EchoFloorOps)
	}
	if doc.Violations != 0 || res.Check == nil || !res.Check.OK() || res.Verified == 0 {
		t.Fatalf("violations %d, check %+v", doc.Violations, res.Check)
	}
	if err := rep.WriteTable(io.Discard); err != nil {
		t.Fatal(err)
	}
}

// TestModeSkipped: a mode the server does not know is skipped with
// ErrModeSwitch, not a failure of the run.
func TestModeSkipped(t *testing.T) {
	rep, err := Run(context.Background(), Config{Spawn: true, SeqdBinary: InProcess, InProcess: inprocess.Spawn, Modes: []string{"no-such-mode"},
		Echo: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 || len(rep.Results) != 0 {
		t.Fatalf("skipped %v results %v", rep.Skipped, rep.Results)
	}
}
