package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
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
