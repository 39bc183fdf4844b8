package reload

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fileSource is a Source whose secret is its file's contents; a file
// starting with "bad" does not parse.
type fileSource struct {
	path    string
	secret  string
	reloads int
}

func (f *fileSource) Name() string    { return "test" }
func (f *fileSource) Files() []string { return []string{f.path} }
func (f *fileSource) Reload() error {
	f.reloads++
	b, err := os.ReadFile(f.path)
	if err != nil {
		return err
	}
	if bytes.HasPrefix(b, []byte("bad")) {
		return errors.New("does not parse")
	}
	f.secret = string(b)
	return nil
}

func newSource(t *testing.T, data string) *fileSource {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	write(t, p, data)
	return &fileSource{path: p, secret: data}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func counts(w *Watcher) (ok, failed float64) {
	return testutil.ToFloat64(w.reloads.WithLabelValues("test")), testutil.ToFloat64(w.fails.WithLabelValues("test"))
}

// TestPoll: a changed file is reloaded once it held still for a poll,
// and only once; an unchanged one never.
func TestPoll(t *testing.T) {
	s := newSource(t, "one")
	w := New("test", slog.New(slog.DiscardHandler), s)
	w.Poll()
	w.Poll()
	if s.reloads != 0 {
		t.Fatalf("unchanged file reloaded %d times", s.reloads)
	}
	write(t, s.path, "two, longer")
	w.Poll() // sees the change: waits for it to settle
	if s.reloads != 0 {
		t.Fatalf("reloaded on the poll that saw the change (the file may be half written)")
	}
	w.Poll()
	if s.secret != "two, longer" || s.reloads != 1 {
		t.Fatalf("after the file settled: secret %q, %d reloads; want the new secret, 1 reload", s.secret, s.reloads)
	}
	w.Poll()
	if s.reloads != 1 {
		t.Fatalf("%d reloads of one change", s.reloads)
	}
	if ok, failed := counts(w); ok != 1 || failed != 0 {
		t.Fatalf("reloads %v, errors %v; want 1, 0", ok, failed)
	}
}

// TestPollSeesReplacement: a file renamed over the old one, with the
// same size and modification time, is a change (its inode differs).
func TestPollSeesReplacement(t *testing.T) {
	s := newSource(t, "aaaa")
	w := New("test", slog.New(slog.DiscardHandler), s)
	st, err := os.Stat(s.path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := s.path + ".new"
	write(t, tmp, "bbbb")
	if err := os.Chtimes(tmp, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		t.Fatal(err)
	}
	w.Poll()
	w.Poll()
	if s.secret != "bbbb" {
		t.Fatalf("secret %q after the replacement, want bbbb", s.secret)
	}
}

// TestFailedReloadOnce: a file that does not parse is tried once per
// version: one error counted and logged however often it is polled; the
// next version is tried again.
func TestFailedReloadOnce(t *testing.T) {
	s := newSource(t, "good")
	var logs bytes.Buffer
	w := New("test", slog.New(slog.NewTextHandler(&logs, nil)), s)
	write(t, s.path, "bad version")
	for range 5 {
		w.Poll()
	}
	if ok, failed := counts(w); ok != 0 || failed != 1 {
		t.Fatalf("reloads %v, errors %v; want 0, 1", ok, failed)
	}
	if n := strings.Count(logs.String(), "secret reload failed"); n != 1 {
		t.Fatalf("%d error lines, want 1:\n%s", n, logs.String())
	}
	if s.secret != "good" {
		t.Fatalf("secret %q; the source keeps its old one on a failure", s.secret)
	}
	write(t, s.path, "fixed")
	w.Poll()
	w.Poll()
	if ok, failed := counts(w); ok != 1 || failed != 1 || s.secret != "fixed" {
		t.Fatalf("after the fix: reloads %v, errors %v, secret %q", ok, failed, s.secret)
	}
}

// TestReloadAll: a signal reloads every source whether its files changed
// or not, and a file it read is not read again by the next polls.
func TestReloadAll(t *testing.T) {
	a, b := newSource(t, "a"), newSource(t, "bad")
	w := New("test", slog.New(slog.DiscardHandler), a, b)
	write(t, a.path, "a2")
	if failed := w.ReloadAll(); failed != 1 {
		t.Fatalf("ReloadAll: %d failed, want 1 (b)", failed)
	}
	if a.reloads != 1 || b.reloads != 1 || a.secret != "a2" {
		t.Fatalf("reloads a %d b %d, a's secret %q", a.reloads, b.reloads, a.secret)
	}
	w.Poll()
	w.Poll()
	if a.reloads != 1 || b.reloads != 1 {
		t.Fatalf("polls after ReloadAll reloaded again: a %d, b %d", a.reloads, b.reloads)
	}
}

// TestRunSignal: Run reloads on a signal and returns when its context
// ends.
func TestRunSignal(t *testing.T) {
	s := newSource(t, "one")
	w := New("test", slog.New(slog.DiscardHandler), s)
	sig := make(chan os.Signal)
	stop := w.Start(context.Background(), time.Hour, sig)
	write(t, s.path, "two")
	sig <- syscall.SIGHUP // unbuffered: Run has taken it
	sig <- syscall.SIGHUP // ... and finished the reload of the first
	stop()
	if s.secret != "two" || s.reloads != 2 {
		t.Fatalf("secret %q, %d reloads; want two, 2", s.secret, s.reloads)
	}
}
