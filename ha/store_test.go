package ha

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/ha/hatest"
)

func TestMarkEncoding(t *testing.T) {
	for _, m := range []uint64{0, 1, 255, 256, 1 << 40, 1<<63 + 5, ^uint64(0)} {
		got, err := decodeMark([]byte(encodeMark(m)))
		if err != nil || got != m {
			t.Fatalf("round trip %d: got %d, %v", m, got, err)
		}
	}
	// Byte order is numeric order: etcd compares values as bytes.
	ms := []uint64{0, 1, 15, 16, 255, 256, 1 << 32, 1<<32 + 1, 1 << 63, ^uint64(0)}
	for i := 1; i < len(ms); i++ {
		if !(encodeMark(ms[i-1]) < encodeMark(ms[i])) {
			t.Fatalf("encodeMark(%d) >= encodeMark(%d)", ms[i-1], ms[i])
		}
	}
	for _, bad := range []string{"", "123", "0000000000000000ff", "000000000000000g", "00000000000000AB"} {
		if _, err := decodeMark([]byte(bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeMark(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func FuzzDecodeMark(f *testing.F) {
	f.Add([]byte("00000000000000ff"))
	f.Add([]byte("zz"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMark(b)
		if err == nil && encodeMark(m) != string(b) {
			t.Fatalf("decodeMark(%q) = %d, which encodes as %q", b, m, encodeMark(m))
		}
	})
}

// TestStoreGuards checks the transaction's guards against a real etcd: a
// save needs the term's election key at the term's revision, and a mark
// above the stored one.
func TestStoreGuards(t *testing.T) {
	c := hatest.Start(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const leaderKey, markKey = "/t/election/a", "/t/mark"
	put, err := cli.Put(ctx, leaderKey, "addr-a")
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision
	lost := 0
	s := NewStore(cli, markKey, leaderKey, rev, func() { lost++ })

	// No mark and no consent: refused, naming the key and both ways out.
	if m, err := s.Load(ctx); !errors.Is(err, ErrNoMark) || !strings.Contains(err.Error(), markKey) ||
		!strings.Contains(err.Error(), "-init") || !strings.Contains(err.Error(), "-advance") {
		t.Fatalf("Load of a missing mark without consent = %d, %v; want ErrNoMark naming %s, -init and -advance", m, err, markKey)
	}
	s.fresh = func() bool { return true } // -init
	if m, err := s.Load(ctx); err != nil || m != 0 {
		t.Fatalf("fresh Load = %d, %v; want 0, nil", m, err)
	}
	if err := s.Save(ctx, 100); err != nil {
		t.Fatalf("Save(100): %v", err)
	}
	if err := s.Save(ctx, 100); !errors.Is(err, ErrMarkNotIncreasing) {
		t.Fatalf("Save(100) again = %v, want ErrMarkNotIncreasing", err)
	}
	if err := s.Save(ctx, 200); err != nil {
		t.Fatalf("Save(200): %v", err)
	}

	// Another writer raised the mark behind this store's back (it cannot
	// happen with one leader, but the txn must refuse anyway).
	if _, err := cli.Put(ctx, markKey, encodeMark(500)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, 300); !errors.Is(err, ErrMarkNotIncreasing) {
		t.Fatalf("Save(300) over a stored 500 = %v, want ErrMarkNotIncreasing", err)
	}
	if err := s.Save(ctx, 600); err != nil {
		t.Fatalf("Save(600): %v", err)
	}

	// A store of a later term (same key, new revision) and the deposed
	// one: only the later one may save (tikv/pd#9157).
	if _, err := cli.Delete(ctx, leaderKey); err != nil {
		t.Fatal(err)
	}
	put2, err := cli.Put(ctx, leaderKey, "addr-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, 700); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed Save(700) = %v, want ErrNotLeader", err)
	}
	if lost != 1 {
		t.Fatalf("onLost called %d times, want 1", lost)
	}
	s2 := NewStore(cli, markKey, leaderKey, put2.Header.Revision, nil)
	if m, err := s2.Load(ctx); err != nil || m != 600 {
		t.Fatalf("new term Load = %d, %v; want 600", m, err)
	}
	if err := s2.Save(ctx, 700); err != nil {
		t.Fatalf("new term Save(700): %v", err)
	}
	if got := mustGet(t, cli, markKey); got != encodeMark(700) {
		t.Fatalf("stored mark %q, want %q", got, encodeMark(700))
	}

	// A corrupt mark is an error, never 0.
	if _, err := cli.Put(ctx, markKey, "garbage"); err != nil {
		t.Fatal(err)
	}
	if m, err := s2.Load(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a corrupt mark = %d, %v; want ErrCorrupt", m, err)
	}
}

func mustGet(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d kvs)", key, err, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}
