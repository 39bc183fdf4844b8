package oracle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqd/seqd/spec"
)

// TestFileStoreLockNamesHolder is item 2 of issue 26: two oracles on one
// data directory both started and served the same values. The second
// open now fails with ErrLocked, naming the holder's pid and host, both
// for a bare FileStore and for an Oracle; closing the holder frees the
// directory.
func TestFileStoreLockNamesHolder(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	dir := t.TempDir()
	o, err := Open(ctx, Config{Dir: dir, Init: true, Format: spec.FormatCounter, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := []string{fmt.Sprintf("pid %d", os.Getpid()), "host " + host, dir, LockFileName}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("%s on a directory in use = %v, want ErrLocked", what, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", what, err, w)
			}
		}
	}
	s2, err := OpenFileStore(dir)
	if err == nil {
		s2.Close()
	}
	check("OpenFileStore", err)
	o2, err := Open(ctx, Config{Dir: dir, Format: spec.FormatCounter, Logger: quiet})
	if err == nil {
		o2.Close()
	}
	check("Open", err)
	v, err := o.Claim(1)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	o3, err := Open(ctx, Config{Dir: dir, Format: spec.FormatCounter, Logger: quiet})
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	defer o3.Close()
	if w, err := o3.Claim(1); err != nil || w <= v {
		t.Fatalf("after reopen: %d, %v; want above %d", w, err, v)
	}
}

// TestSaveUsesItsOwnTempFile: saves used one fixed temp name, so two
// writers on a directory overwrote and renamed each other's temp file.
// A file at that name (another writer's save in flight) is now left alone.
func TestSaveUsesItsOwnTempFile(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := filepath.Join(dir, markTempName)
	if err := os.WriteFile(other, []byte("another writer's save"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []uint64{10, 20} {
		if err := s.Save(context.Background(), m); err != nil {
			t.Fatalf("Save(%d): %v", m, err)
		}
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "another writer's save" {
		t.Errorf("the other writer's temp file: %q, %v; a save wrote or renamed it", b, err)
	}
	if m, err := s.Load(context.Background()); err != nil || m != 20 {
		t.Errorf("Load = %d, %v; want 20", m, err)
	}
	a, err := writeTemp(dir, encodeMarkFile(1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := writeTemp(dir, encodeMarkFile(2))
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !strings.HasPrefix(filepath.Base(a), markTempName+"-") {
		t.Errorf("two temp files: %s and %s; want distinct names under %s-", a, b, markTempName)
	}
}

// TestSaveBelowStoredMark: a Save never writes a mark below the one the
// file holds, whether the store loaded it or not, and whoever wrote it;
// and it never overwrites a mark file that does not read back.
func TestSaveBelowStoredMark(t *testing.T) {
	ctx := context.Background()
	write := func(t *testing.T, dir string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, MarkFileName), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(t *testing.T, dir string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, MarkFileName))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("not loaded", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, encodeMarkFile(100))
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Save(ctx, 50); !errors.Is(err, ErrMarkBackward) {
			t.Fatalf("Save(50) over a stored 100 = %v, want ErrMarkBackward", err)
		}
		if m, _ := decodeMarkFile(stored(t, dir)); m != 100 {
			t.Fatalf("stored mark %d, want 100 kept", m)
		}
	})
	t.Run("written since", func(t *testing.T) {
		dir := t.TempDir()
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Save(ctx, 200); err != nil {
			t.Fatal(err)
		}
		write(t, dir, encodeMarkFile(1000)) // a writer that bypassed the lock
		err = s.Save(ctx, 500)
		if !errors.Is(err, ErrMarkBackward) || !strings.Contains(err.Error(), "1000") {
			t.Fatalf("Save(500) over a stored 1000 = %v, want ErrMarkBackward naming 1000", err)
		}
		if m, _ := decodeMarkFile(stored(t, dir)); m != 1000 {
			t.Fatalf("stored mark %d, want 1000 kept", m)
		}
		if err := s.Save(ctx, 1500); err != nil {
			t.Fatalf("Save above the stored mark: %v", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		dir := t.TempDir()
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Save(ctx, 200); err != nil {
			t.Fatal(err)
		}
		bad := encodeMarkFile(1 << 50)
		bad[13] ^= 1
		write(t, dir, bad)
		if err := s.Save(ctx, 300); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Save over a damaged mark file = %v, want ErrCorrupt", err)
		}
		if got := stored(t, dir); string(got) != string(bad) {
			t.Fatal("Save overwrote a mark file it could not read")
		}
	})
}
