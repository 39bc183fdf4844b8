package ha

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/oracle"
)

// TestWitnessRefusesRestoredMark drives a term's Store with a witness
// against a real etcd: the marks it loads and saves raise the witness
// durably; a mark put back below it (a restored snapshot) or deleted (a
// wiped etcd, even with -init's consent) is refused with ErrMarkBehind,
// unless -advance or the hybrid clock floors the term above the witness.
func TestWitnessRefusesRestoredMark(t *testing.T) {
	c := hatest.Start(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const leaderKey, markKey = "/w/election/a", "/w/mark"
	put, err := cli.Put(ctx, leaderKey, "addr-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, markKey, encodeMark(100)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := OpenWitness(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Mark(); ok {
		t.Fatal("a fresh data directory has a witnessed mark")
	}
	if _, err := OpenWitness(dir); !errors.Is(err, oracle.ErrLocked) {
		t.Fatalf("second OpenWitness on one directory: %v, want oracle.ErrLocked", err)
	}
	store := func() *Store {
		s := NewStore(cli.KV, markKey, leaderKey, put.Header.Revision, nil)
		s.witness, s.prefix, s.endpoints = w, "/w", c.Endpoints()
		return s
	}
	s := store()
	if m, err := s.Load(ctx); err != nil || m != 100 {
		t.Fatalf("fresh witness, etcd mark 100: Load = %d, %v", m, err)
	}
	if m, _ := w.Mark(); m != 100 {
		t.Fatalf("witness %d after loading 100", m)
	}
	if err := s.Save(ctx, 200); err != nil {
		t.Fatal(err)
	}
	if m, _ := w.Mark(); m != 200 {
		t.Fatalf("witness %d after saving 200", m)
	}
	// Durable: a new process reads 200 back.
	w.Close()
	if w, err = OpenWitness(dir); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Close() }()
	if m, ok := w.Mark(); !ok || m != 200 {
		t.Fatalf("reopened witness: %d, %v; want 200", m, ok)
	}

	// The restore: etcd's mark goes back to 150.
	if _, err := cli.Put(ctx, markKey, encodeMark(150)); err != nil {
		t.Fatal(err)
	}
	_, err = store().Load(ctx)
	if !errors.Is(err, ErrMarkBehind) {
		t.Fatalf("Load of 150 under witness 200: %v, want ErrMarkBehind", err)
	}
	for _, want := range []string{"holds mark 150", "at 200", w.Path(), `"/w"`, c.Endpoints()[0], "restored etcd snapshot", "-advance VALUE", "at least 200"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	s = store()
	s.advance = 199
	if _, err := s.Load(ctx); !errors.Is(err, ErrMarkBehind) {
		t.Fatalf("-advance 199 under witness 200: %v, want ErrMarkBehind", err)
	}
	s = store()
	s.advance = 200
	if m, err := s.Load(ctx); err != nil || m != 150 {
		t.Fatalf("-advance 200 under witness 200: Load = %d, %v", m, err)
	}
	s = store()
	s.clockFloor = func() uint64 { return 200 }
	if _, err := s.Load(ctx); !errors.Is(err, ErrMarkBehind) {
		t.Fatalf("hybrid clock at the witness: %v, want ErrMarkBehind", err)
	}
	s = store()
	s.clockFloor = func() uint64 { return 201 }
	if _, err := s.Load(ctx); err != nil {
		t.Fatalf("hybrid clock above the witness: %v", err)
	}

	// A wiped etcd: no mark, and -init's consent does not make it new.
	if _, err := cli.Delete(ctx, markKey); err != nil {
		t.Fatal(err)
	}
	s = store()
	s.fresh = func() bool { return true }
	if _, err := s.Load(ctx); !errors.Is(err, ErrMarkBehind) || !strings.Contains(err.Error(), "has no mark") {
		t.Fatalf("missing mark under witness 200 with consent: %v, want ErrMarkBehind", err)
	}
}

// TestWitnessCorrupt: a witness that does not read back stops the
// instance with advice; it is never taken as a fresh directory.
func TestWitnessCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, WitnessDirName), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, WitnessDirName, oracle.MarkFileName), []byte("not a mark"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenWitness(dir)
	if !errors.Is(err, ErrWitness) || !errors.Is(err, oracle.ErrCorrupt) || !strings.Contains(err.Error(), "-advance") {
		t.Fatalf("corrupt witness: %v, want ErrWitness wrapping oracle.ErrCorrupt, with advice", err)
	}
}

// TestStandbyWitnessesWatchedMarks: an instance raises its witness to the
// marks other instances write, without leading (its terms here serve
// nothing and load no mark).
func TestStandbyWitnessesWatchedMarks(t *testing.T) {
	c := hatest.Start(t, 1)
	n, stop := runIdle(t, c.Endpoints(), "/sw", t.TempDir())
	defer func() {
		stop()
		n.Close()
	}()
	for _, m := range []uint64{7, 1 << 30} {
		pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Client().Put(pctx, "/sw/mark", encodeMark(m))
		pcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, _ := n.Witness().Mark(); m == 1<<30 {
			break
		}
		if time.Now().After(deadline) {
			m, _ := n.Witness().Mark()
			t.Fatalf("witness %d 10s after the mark was written as %d", m, 1<<30)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.Witness().Raise(5); err != nil {
		t.Fatal(err)
	}
	if m, _ := n.Witness().Mark(); m != 1<<30 {
		t.Fatalf("witness %d after Raise(5), want %d: a lower mark lowered it", m, 1<<30)
	}
}

// TestStopRaisesWitness: a mark written just before an instance stops is
// in its witness once Run has returned. The watch may not have delivered
// it yet; the stop reads the mark once more. Else a standby stopped right
// after the leader raised the mark kept the older one, and took a
// snapshot restored at that older mark for the group's (the process test
// TestRestoredMarkRefused saw it serve again in 3 runs of 5). Each round
// races the watch once, so that the stop's read is what the test checks.
func TestStopRaisesWitness(t *testing.T) {
	c := hatest.Start(t, 1)
	dir := t.TempDir()
	put := func(m uint64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Client().Put(ctx, "/sr/mark", encodeMark(m)); err != nil {
			t.Fatal(err)
		}
	}
	put(1)
	for round := range 10 {
		n, stop := runIdle(t, c.Endpoints(), "/sr", dir)
		// The watch is up once the witness holds the mark read before it.
		prev := uint64(1) << (2 * round)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if m, _ := n.Witness().Mark(); m >= prev {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the witness never reached the mark %d", round, prev)
			}
		}
		next := prev << 2
		put(next)
		stop()
		got, _ := n.Witness().Mark()
		n.Close()
		if got != next {
			t.Fatalf("round %d: witness %d after a stop that followed the mark %d: the stop did not read the mark", round, got, next)
		}
	}
}

// runIdle runs a node with a witness in dir whose terms serve nothing
// and load no mark; stop ends its Run and waits for it (Close is the
// caller's).
func runIdle(t *testing.T, eps []string, prefix, dir string) (n *Node, stop func()) {
	t.Helper()
	n, err := New(Config{Endpoints: eps, Prefix: prefix, Advertise: "a", TTL: time.Second, Beat: -1, DataDir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx, func(ctx context.Context, _ *Term) error { <-ctx.Done(); return nil })
	}()
	return n, func() { cancel(); <-done }
}
