package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/spec"
)

// statusOf asks a running seqd for its Status.
func statusOf(t *testing.T, addr string) *adminpb.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestModeKeptInDataDir is item 1 of issue 27 for a single instance: the
// mode SetMode sets is kept in the data directory, beside the mark, and a
// restart (with another -mode) comes back in it and serves in it; a mode file
// that names no mode stops seqd.
func TestModeKeptInDataDir(t *testing.T) {
	for _, mode := range modes.All {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			flag := spec.ModeSpecS0 // -mode on every start: only the kept mode brings seqd back to mode
			if mode == spec.ModeSpecS0 {
				flag = spec.ModeHERD
			}
			r := startHA(t, Config{Data: dir, Init: true, Mode: flag})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cc, err := adminclient.Dial(ctx, r.addrs.Admin)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: mode}); err != nil {
				t.Fatalf("SetMode(%s): %v", mode, err)
			}
			cc.Close()
			last := r.values(t, 20, 0)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			r = startHA(t, Config{Data: dir, Mode: flag})
			if got := statusOf(t, r.addrs.Admin).GetMode(); got != mode {
				t.Fatalf("after a restart seqd serves %q, want %q (set before the restart)", got, mode)
			}
			r.values(t, 20, last)
		})
	}
	t.Run("bad file", func(t *testing.T) {
		dir := t.TempDir()
		startHA(t, Config{Data: dir, Init: true}).stop()
		if err := os.WriteFile(filepath.Join(dir, ModeFileName), []byte("turbo\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := startHA(t, Config{Data: dir})
		err := r.stop()
		if err == nil || !strings.Contains(err.Error(), ModeFileName) || !strings.Contains(err.Error(), "turbo") {
			t.Fatalf("start with a mode file naming no mode = %v; want an error naming the file and the mode", err)
		}
	})
}
