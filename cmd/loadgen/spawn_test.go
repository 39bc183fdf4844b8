package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSpawnWithoutSeqdNamesFlag: -spawn with no seqd binary next to
// loadgen or on PATH fails before any load, with an error that says where
// it looked and names -seqd-binary, the way out (exit 1: the run failed;
// not 3, a mode skipped).
func TestSpawnWithoutSeqdNamesFlag(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errb bytes.Buffer
	code := realMain([]string{"-spawn", "-duration", "100ms", "-warmup", "0s", "-echo", "-1s"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "-seqd-binary") || !strings.Contains(errb.String(), "on PATH") {
		t.Fatalf("exit %d, stderr %q: want exit 1 and an error naming -seqd-binary and where loadgen looked", code, errb.String())
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(errb.String()))
}
