package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqd/seqd/internal/testbin"
	"github.com/seqd/seqd/spec"
)

// TestWireWithClientMode is issue 29 items 4 and 5: -engine wire with a
// mode the wire generator does not speak (fasst) runs that mode through
// the client library in the same run, reports it in its own table and as
// its own series in the plot, and says where it wrote the JSON and the
// plot.
func TestWireWithClientMode(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns seqd and runs two modes; skipped in -short")
	}
	// One mode the wire generator speaks and one it does not (fasst, the
	// first that serves ranges).
	var wire, lib string
	for _, f := range spec.ModeTable {
		switch {
		case f.Wire && wire == "":
			wire = f.Name
		case !f.Wire && f.Ranges && lib == "":
			lib = f.Name
		}
	}
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.svg")
	args := []string{"-engine", "wire", "-spawn", "-seqd-binary", testbin.Seqd(t), "-modes", wire + "," + lib, "-flows", "1",
		"-duration", "200ms", "-warmup", "100ms", "-no-floors", "-no-redis", "-window", "8", "-quiet",
		"-json-file", jsonPath, "-plot", plotPath}
	var out, errb bytes.Buffer
	if code := realMainEnv(args, &out, &errb, nil); code != 0 {
		t.Fatalf("loadgen %q: exit %d\n%s\n%s", args, code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"seqd " + wire, "  lost: requests given up", "modes the wire generator does not speak (" + lib + "), measured through the client library:",
		"\n  " + lib + " ", "results (JSON) written to " + jsonPath + "\n", "plot written to " + plotPath + "\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	svg, err := os.ReadFile(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">seqd " + wire + "<", ">seqd " + lib + ", client library (1×8)<", ">loadgen -engine wire -provider soft: 200ms measured after 100ms warm-up"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
}
