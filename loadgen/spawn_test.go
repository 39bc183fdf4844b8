package loadgen

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestSpawnInProcessNeedsSpawner: with no Config.InProcess, asking for an
// in-process seqd is an error naming the missing spawner, not a server
// loadgen links anyway; with one, loadgen calls it with the run's options.
func TestSpawnInProcessNeedsSpawner(t *testing.T) {
	c := &Config{Spawn: true, SeqdBinary: InProcess, SeqdCores: "1", ProviderOpts: "loss=0.5"}
	if _, err := spawn(context.Background(), c, "herd"); !errors.Is(err, ErrNoSpawner) {
		t.Fatalf("spawn without a spawner: %v, want ErrNoSpawner", err)
	}
	var got []string
	stopped := false
	c.InProcess = func(_ context.Context, mode, dir, cores, opts string) (string, func() error, error) {
		got = []string{mode, cores, opts}
		if dir == "" {
			t.Error("no data directory")
		}
		return "127.0.0.1:1", func() error { stopped = true; return nil }, nil
	}
	s, err := spawn(context.Background(), c, "herd")
	if err != nil {
		t.Fatal(err)
	}
	if s.admin != "127.0.0.1:1" || len(got) != 3 || got[0] != "herd" || got[1] != "1" || got[2] != "loss=0.5" {
		t.Fatalf("spawned %+v with %q", s, got)
	}
	if err := s.stop(); err != nil || !stopped {
		t.Fatalf("stop: %v, stopped %v", err, stopped)
	}
}

// TestSpawnWithoutSeqd: with no seqd binary named or found and no
// in-process spawner, spawn says so (ErrNoSeqd) and names -seqd-binary.
func TestSpawnWithoutSeqd(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := spawn(context.Background(), &Config{Spawn: true}, "spec-s0")
	if !errors.Is(err, ErrNoSeqd) || !strings.Contains(err.Error(), "-seqd-binary") {
		t.Fatalf("spawn with no seqd: %v, want ErrNoSeqd naming -seqd-binary", err)
	}
}
