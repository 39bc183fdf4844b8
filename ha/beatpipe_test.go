package ha

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/ha/hatest"
)

// slowKV answers every transaction delay after etcd did.
type slowKV struct {
	clientv3.KV
	delay time.Duration
}

func (s *slowKV) Txn(ctx context.Context) clientv3.Txn {
	return &slowTxn{Txn: s.KV.Txn(ctx), delay: s.delay}
}

type slowTxn struct {
	clientv3.Txn
	delay time.Duration
}

func (s *slowTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { s.Txn = s.Txn.If(cs...); return s }
func (s *slowTxn) Then(ops ...clientv3.Op) clientv3.Txn { s.Txn = s.Txn.Then(ops...); return s }
func (s *slowTxn) Else(ops ...clientv3.Op) clientv3.Txn { s.Txn = s.Txn.Else(ops...); return s }
func (s *slowTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := s.Txn.Commit()
	time.Sleep(s.delay)
	return resp, err
}

// TestBeatsPipelined: with every heartbeat answered 220 ms after it was
// sent (a slow etcd; the serving lease is 400 ms, a beat 100 ms), the
// leader's gate stays open: heartbeats go out every beat, not one after
// the last was answered (which needs answers within 200 ms, and closed
// the gate for 40 ms of every 440 here).
func TestBeatsPipelined(t *testing.T) {
	c := hatest.Start(t, 1)
	n, err := New(Config{Endpoints: c.Endpoints(), Prefix: "/beatpipe", Advertise: "a", Logger: quietLogger(), Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const delay = 220 * time.Millisecond
	n.beatKV = &slowKV{KV: n.cli.KV, delay: delay}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx, func(ctx context.Context, term *Term) error { <-ctx.Done(); return nil })
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for n.Term() == nil {
		if time.Now().After(deadline) {
			t.Fatal("never led")
		}
		time.Sleep(5 * time.Millisecond)
	}
	term := n.Term()
	closed, samples := 0, 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		samples++
		if got := n.Term(); got == nil {
			closed++

		} else if got != term {
			t.Fatal("the term changed")
		}
	}
	if closed > 0 {
		t.Fatalf("the gate was closed in %d of %d samples over 2 s with heartbeats answered %v after they were sent",
			closed, samples, delay)
	}
}
