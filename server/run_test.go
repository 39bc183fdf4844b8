package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/oracle"
	_ "github.com/seqd/seqd/verbs/soft"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// start runs seqd on c until it is ready, then stops it. It returns Run's
// error and whether seqd got as far as serving.
func start(t *testing.T, c Config) (served bool, err error) {
	t.Helper()
	c.Device, c.Admin, c.Metrics = "127.0.0.1:0", "127.0.0.1:0", "off"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Run(ctx, c, quiet, func(Addrs) { served = true; cancel() })
	return served, err
}

// TestMissingDataRefused is defect 6 of issue 12: a missing data directory,
// a missing mark file or an empty mark file never starts seqd from scratch,
// in either format. seqd stops with an error that names the path and the
// recovery (restore from a backup, -advance, -init for a new deployment);
// with Init a missing directory or file is a new deployment, and an empty
// file still stops it.
func TestMissingDataRefused(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T) string
		initOK bool
	}{
		{"dir missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "unmounted") }, true},
		{"file missing", func(t *testing.T) string { return t.TempDir() }, true},
		{"file empty", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, oracle.MarkFileName), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}, false},
	}
	for _, format := range []string{"counter", "hybrid"} {
		for _, tc := range cases {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				dir := tc.setup(t)
				served, err := start(t, Config{Data: dir, Format: format})
				if served || err == nil {
					t.Fatalf("seqd served on %s (%s) without -init: err %v", dir, tc.name, err)
				}
				for _, s := range []string{dir, "backup", "-advance"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				if tc.initOK && !strings.Contains(err.Error(), "-init") {
					t.Errorf("error %q does not name -init", err)
				}
				if _, serr := os.Stat(dir); tc.name == "dir missing" && serr == nil {
					t.Errorf("seqd created %s without -init", dir)
				}
				served, err = start(t, Config{Data: dir, Format: format, Init: true})
				if served != tc.initOK {
					t.Fatalf("with -init: served %v, err %v; want served %v", served, err, tc.initOK)
				}
				if !tc.initOK {
					return
				}
				if err != nil {
					t.Fatalf("with -init: %v", err)
				}
				// -init left a mark: the next start needs no flag.
				if served, err := start(t, Config{Data: dir, Format: format}); !served || err != nil {
					t.Fatalf("restart without -init: served %v, err %v", served, err)
				}
			})
		}
	}
}

// TestAdvanceRecovers: after the mark file is lost, -advance VALUE starts
// seqd above VALUE without -init.
func TestAdvanceRecovers(t *testing.T) {
	dir := t.TempDir()
	const v = 1 << 40
	if served, err := start(t, Config{Data: dir, Format: "counter", Advance: v}); !served || err != nil {
		t.Fatalf("-advance on a missing mark: served %v, err %v", served, err)
	}
	s, err := oracle.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Load(context.Background())
	if err != nil || m <= v {
		t.Fatalf("mark after -advance %d: %d, %v; want above %d", uint64(v), m, err, uint64(v))
	}
}
