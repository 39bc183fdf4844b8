package ha

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
)

// errLost is what faultKV returns for a transaction whose answer it
// "lost".
var errLost = errors.New("faultkv: connection reset (answer lost)")

// faultKV is a clientv3.KV that loses answers: while armed, a Txn commits
// for real (or, with before, does not) and then returns errLost, the way a
// request that reached etcd but whose reply was lost looks to the client.
// Reads (Get, and the read-only Txn of the re-read) can be failed too.
type faultKV struct {
	clientv3.KV
	commitThenFail atomic.Int32 // this many writing Txns commit, then fail
	failBefore     atomic.Int32 // this many writing Txns fail without reaching etcd
	failReads      atomic.Int32 // this many read-only Txns fail
	injected       atomic.Int32
}

func (f *faultKV) Txn(ctx context.Context) clientv3.Txn {
	return &faultTxn{Txn: f.KV.Txn(ctx), f: f}
}

type faultTxn struct {
	clientv3.Txn
	f      *faultKV
	writes bool
}

func (t *faultTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *faultTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if op.IsPut() {
			t.writes = true
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *faultTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func take(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func (t *faultTxn) Commit() (*clientv3.TxnResponse, error) {
	switch {
	case t.writes && take(&t.f.failBefore):
		t.f.injected.Add(1)
		return nil, errLost
	case !t.writes && take(&t.f.failReads):
		t.f.injected.Add(1)
		return nil, errLost
	}
	resp, err := t.Txn.Commit()
	if err == nil && t.writes && take(&t.f.commitThenFail) {
		t.f.injected.Add(1)
		return nil, errLost
	}
	return resp, err
}

// TestStoreAmbiguousCommit is defect 8 of issue 12 at the Store: a save
// whose transaction committed but returned an error is resolved by
// re-reading the mark (or, when that read fails too, by the retry), never
// left to be refused as "not increasing" for ever; a save that did not
// commit is reported as failed, and a deposed term's ambiguous save is
// never taken for a success.
func TestStoreAmbiguousCommit(t *testing.T) {
	c := hatest.Start(t, 1)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const leaderKey, markKey = "/amb/election/a", "/amb/mark"
	put, err := cli.Put(ctx, leaderKey, "addr-a")
	if err != nil {
		t.Fatal(err)
	}
	f := &faultKV{KV: cli.KV}
	s := NewStore(f, markKey, leaderKey, put.Header.Revision, nil)
	s.fresh = func() bool { return true } // a new group
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}

	// The first save of a fresh group commits, and its answer is lost.
	f.commitThenFail.Store(1)
	if err := s.Save(ctx, 100); err != nil {
		t.Fatalf("Save(100) committed but answered %v: want it resolved as a success", err)
	}
	if got := mustGet(t, cli, markKey); got != encodeMark(100) {
		t.Fatalf("stored %q, want %q", got, encodeMark(100))
	}
	// The same over an existing mark.
	f.commitThenFail.Store(1)
	if err := s.Save(ctx, 200); err != nil {
		t.Fatalf("Save(200) committed but answered %v: want it resolved as a success", err)
	}

	// Committed, answer lost, and the re-read fails too: the outcome is
	// unknown, so Save fails; the oracle's retry of the same target then
	// finds it stored and succeeds, instead of "not increasing".
	f.commitThenFail.Store(1)
	f.failReads.Store(1)
	if err := s.Save(ctx, 300); err == nil || !errors.Is(err, errLost) {
		t.Fatalf("Save(300) with the re-read failing = %v, want the lost answer", err)
	}
	if err := s.Save(ctx, 300); err != nil {
		t.Fatalf("retry of Save(300), which had committed: %v", err)
	}
	if err := s.Save(ctx, 300); !errors.Is(err, ErrMarkNotIncreasing) {
		t.Fatalf("a third Save(300) = %v, want ErrMarkNotIncreasing", err)
	}

	// Not committed: an error, and the retry writes it.
	f.failBefore.Store(1)
	if err := s.Save(ctx, 400); !errors.Is(err, errLost) {
		t.Fatalf("Save(400) that never reached etcd = %v, want its error", err)
	}
	if got := mustGet(t, cli, markKey); got != encodeMark(300) {
		t.Fatalf("stored %q after a failed save, want %q", got, encodeMark(300))
	}
	if err := s.Save(ctx, 400); err != nil {
		t.Fatalf("retry of Save(400): %v", err)
	}

	// Committed, answer lost, and the term is gone by the re-read: not a
	// success (the term is over, whatever the write did).
	lost := false
	s.onLost = func() { lost = true }
	f.commitThenFail.Store(1)
	f2 := &deposeKV{faultKV: f, cli: cli, key: leaderKey}
	s.kv = f2
	if err := s.Save(ctx, 500); !errors.Is(err, ErrNotLeader) || !lost {
		t.Fatalf("ambiguous Save(500) of a deposed term = %v (onLost %v), want ErrNotLeader", err, lost)
	}
	if n := f.injected.Load(); n != 6 {
		t.Fatalf("injected %d faults, want 6", n)
	}
}

// deposeKV deletes the election key after a writing Txn, before the
// caller can re-read: the term ends while the save's outcome is unknown.
type deposeKV struct {
	*faultKV
	cli *clientv3.Client
	key string
}

func (d *deposeKV) Txn(ctx context.Context) clientv3.Txn {
	return &deposeTxn{faultTxn: d.faultKV.Txn(ctx).(*faultTxn), d: d, ctx: ctx}
}

type deposeTxn struct {
	*faultTxn
	d   *deposeKV
	ctx context.Context
}

func (t *deposeTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.faultTxn.If(cs...); return t }
func (t *deposeTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.faultTxn.Then(ops...); return t }
func (t *deposeTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.faultTxn.Else(ops...); return t }
func (t *deposeTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.faultTxn.Commit()
	if t.writes {
		if _, derr := t.d.cli.Delete(t.ctx, t.d.key); derr != nil {
			return nil, derr
		}
	}
	return resp, err
}

// TestCounterLeaderServesAfterAmbiguousCommit is defect 8 of issue 12 end
// to end: a counter-format HA leader whose mark saves commit but answer
// with an error keeps serving. Before the fix, the retry of the same
// target was refused as "not increasing" for ever, and since claims could
// not move the counter past the mark, the leader never served again.
func TestCounterLeaderServesAfterAmbiguousCommit(t *testing.T) {
	c := hatest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := New(Config{Endpoints: c.Endpoints(), Prefix: "/amb-node", Advertise: "a", TTL: 2 * time.Second, Logger: quietLogger(), Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	f := &faultKV{}
	n.kvWrap = func(kv clientv3.KV) clientv3.KV { f.KV = kv; return f }
	var (
		mu  sync.Mutex
		orc *oracle.Oracle
	)
	ready := make(chan struct{})
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(rctx, func(ctx context.Context, term *Term) error {
			o, err := term.OpenOracle(ctx, oracle.Config{Format: spec.FormatCounter, CounterWindow: 128, MaxBatch: 16,
				RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, Logger: quietLogger()})
			if err != nil {
				return err
			}
			mu.Lock()
			if orc == nil {
				orc = o
				close(ready)
			}
			mu.Unlock()
			<-ctx.Done()
			return o.Close()
		})
	}()
	defer func() { rcancel(); <-done }()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("no term began")
	}
	mu.Lock()
	o := orc
	mu.Unlock()
	// Every save from now on commits, and the first 5 lose their answer;
	// the re-read of the first fails too, so that one is resolved by the retry.
	f.commitThenFail.Store(5)
	f.failReads.Store(1)
	// 40 windows' worth of values: each window needs a save.
	var last uint64
	for i := 0; i < 40*128/16; i++ {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := o.ClaimWait(cctx, 16)
		ccancel()
		if err != nil {
			t.Fatalf("claim %d (after %d injected faults): %v; the leader stopped serving", i, f.injected.Load(), err)
		}
		if v <= last {
			t.Fatalf("claim %d: %d not above %d", i, v, last)
		}
		last = v + 15
	}
	if got := f.injected.Load(); got != 6 {
		t.Fatalf("injected %d faults, want 6 (5 lost answers, 1 failed re-read)", got)
	}
	if term := n.term.Load(); term == nil || !term.Valid() {
		t.Fatal("the term ended")
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
