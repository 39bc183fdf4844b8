package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/verbs"
)

// TestSpecS0Faults: a Spec-S0 client whose device loses, duplicates and
// reorders packets serves serial callers (driving the engine themselves,
// retransmitting from their own goroutine) and pipelined requests at
// once: every value is unique, each caller's values increase, nothing
// regresses, and losses were retransmitted.
func TestSpecS0Faults(t *testing.T) {
	addrs := startServer(t, server.Config{})
	c := dialT(t, addrs.Admin, WithDevice("soft", "127.0.0.1:0", "loss=0.05,dup=0.05,reorder=0.05,seed=9"),
		WithRetransmit(2*time.Millisecond), WithWindow(16), WithQPs(2))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[Timestamp]bool{}
	record := func(ts Timestamp) {
		mu.Lock()
		defer mu.Unlock()
		if seen[ts] {
			t.Errorf("value %d handed out twice", ts)
		}
		seen[ts] = true
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := Timestamp(0)
			for range 300 {
				ts, err := c.GetTimestamp(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if ts <= last {
					t.Errorf("%d after %d", ts, last)
				}
				last = ts
				record(ts)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		const w, total = 24, 2000
		done := make(chan *Request, w)
		reqs := make([]Request, w)
		issued, inflight := 0, 0
		for i := range reqs {
			reqs[i].Done = done
			if err := c.Submit(&reqs[i]); err != nil {
				t.Error(err)
				return
			}
			issued++
			inflight++
		}
		for inflight > 0 {
			r := <-done
			inflight--
			if r.Err != nil {
				t.Error(r.Err)
				continue
			}
			record(r.TS)
			if issued < total {
				if err := c.Submit(r); err != nil {
					t.Error(err)
					continue
				}
				issued++
				inflight++
			}
		}
	}()
	wg.Wait()
	st := c.Stats()
	t.Logf("%d values; stats %+v; %d calls drove the engine", len(seen), st, c.st.driven.Load())
	if st.Regressions != 0 || st.Retransmits == 0 || len(seen) != 2*300+2000 {
		t.Fatalf("%d values, %d regressions, %d retransmits: want %d values, none, some", len(seen), st.Regressions, st.Retransmits, 2*300+2000)
	}
}

// TestSpecS0StampsOnTheClientsClock: a receive stamp (verbs.WC.Arrived)
// maps onto the client's clock exactly, however long the client was
// descheduled while it built the transport. The zero of the mapping was
// taken from two readings, one of each clock; a goroutine descheduled
// between them (here: a clock read that takes 30 ms, as on the HA
// storm's loaded host) put every stamp of the session that much early,
// and every answer was rejected as late: base failed with "stamp maps to
// 30ms before the reading taken before it".
func TestSpecS0StampsOnTheClientsClock(t *testing.T) {
	dev := openSoft(t, "")
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	start := time.Now()
	now := func() time.Duration { return time.Since(start) }
	slow := func() time.Duration { d := now(); time.Sleep(30 * time.Millisecond); return d }
	s, err := newSpecS0(&transportEnv{dev: dev, pd: pd, qps: 1, window: 4, retransmit: time.Second, st: &stats{},
		now: slow, start: start})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.arrived.within == 0 {
		t.Skip("the soft device does not bound its stamps (ArrivedWithin 0)")
	}
	before := now()
	wc := verbs.WC{Arrived: verbs.Now()}
	after := now()
	by := s.arrived.by(after+time.Hour, wc.Arrived) - s.arrived.within // not capped at now
	if by < before || by > after {
		t.Fatalf("stamp maps to %v before the reading taken before it (%v after it)", before-by, by-after)
	}
}
