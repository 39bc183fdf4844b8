package client

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

// TestGetRange: in fasst mode, goroutines mixing GetRange (k from 1 to
// MaxRange) and GetTimestamp get values that are all unique, each call's
// values above every value any call completed before it began (real-time
// order), every range consecutive within one millisecond (hybrid), and
// the client's floor above every range's last value.
func TestGetRange(t *testing.T) {
	a := startServer(t, server.Config{Mode: spec.ModeFaSST, Workers: 2, MaxWindow: 64})
	c := dialT(t, a.Admin, WithQPs(2), WithWindow(16))
	if c.Mode() != spec.ModeFaSST {
		t.Fatalf("mode %q", c.Mode())
	}
	var (
		mu       sync.Mutex
		got      []Range
		maxDone  atomic.Uint64 // the largest value of any completed call
		failures atomic.Int64
	)
	ks := []int{1, 2, 16, 256, 4096, MaxRange}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range 40 {
				before := maxDone.Load()
				var r Range
				var err error
				if (g+i)%3 == 0 {
					var ts Timestamp
					ts, err = c.GetTimestamp(ctx)
					r = Range{First: ts, Count: 1}
				} else {
					r, err = c.GetRange(ctx, ks[(g*7+i)%len(ks)])
				}
				if err != nil {
					t.Errorf("call: %v", err)
					failures.Add(1)
					return
				}
				if uint64(r.First) <= before {
					t.Errorf("range %v+%d not above %v, completed before the call began", r.First, r.Count, Timestamp(before))
				}
				if spec.CrossesMillisecond(uint64(r.First), r.Count) {
					t.Errorf("range %v…%v spans a millisecond", r.First, r.Last())
				}
				for {
					m := maxDone.Load()
					if uint64(r.Last()) <= m || maxDone.CompareAndSwap(m, uint64(r.Last())) {
						break
					}
				}
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failures.Load() > 0 {
		return
	}
	seen := map[Timestamp]bool{}
	for _, r := range got {
		for i := range r.Count {
			if v := r.At(i); seen[v] {
				t.Fatalf("value %v handed out twice", v)
			} else {
				seen[v] = true
			}
		}
	}
	if m := c.maxRet.Load(); m < maxDone.Load() {
		t.Fatalf("client floor %d below the last value handed out %d", m, maxDone.Load())
	}
	t.Logf("%d calls, %d values", len(got), len(seen))
}

// timedRange is a range one call got, and when the call ran.
type timedRange struct {
	r          Range
	start, end time.Duration
}

// checkRanges checks ranges the way verify.History checks timestamps: no
// value in two ranges, and a call's values above every value of the
// calls that completed before it began (real-time order); in the hybrid
// format no range spans a millisecond.
func checkRanges(t *testing.T, rs []timedRange) (values int) {
	t.Helper()
	seen := map[Timestamp]bool{}
	for _, x := range rs {
		if spec.CrossesMillisecond(uint64(x.r.First), x.r.Count) {
			t.Fatalf("range %v…%v spans a millisecond", x.r.First, x.r.Last())
		}
		for i := range x.r.Count {
			v := x.r.At(i)
			if seen[v] {
				t.Fatalf("value %v handed out twice", v)
			}
			seen[v] = true
		}
	}
	byEnd := slices.Clone(rs)
	slices.SortFunc(byEnd, func(a, b timedRange) int { return cmp.Compare(a.end, b.end) })
	byStart := slices.Clone(rs)
	slices.SortFunc(byStart, func(a, b timedRange) int { return cmp.Compare(a.start, b.start) })
	var maxEnded Timestamp
	j := 0
	for _, x := range byStart {
		for ; j < len(byEnd) && byEnd[j].end < x.start; j++ {
			maxEnded = max(maxEnded, byEnd[j].r.Last())
		}
		if x.r.First <= maxEnded {
			t.Fatalf("range %v+%d not above %v, handed out before the call began", x.r.First, x.r.Count, maxEnded)
		}
	}
	return len(seen)
}

// TestGetRangeFaultsAndRestart: ranges stay unique, consecutive within a
// millisecond and in real-time order across 5% loss, duplication and
// reordering both ways (retransmissions under fresh IDs) and a server
// restart (reconnect and resend): a range is never pieced together, and
// an answer to an earlier transmission never completes a later one.
func TestGetRangeFaultsAndRestart(t *testing.T) {
	const faults = "loss=0.05,dup=0.05,reorder=0.05,seed=11"
	dir := t.TempDir()
	a, stop := startStoppable(t, server.Config{Mode: spec.ModeFaSST, Data: dir, ProviderOpts: faults})
	c := dialT(t, a.Admin, WithDevice("soft", "", faults), WithRetransmit(5*time.Millisecond))
	t0 := time.Now()
	var (
		mu  sync.Mutex
		got []timedRange
	)
	call := func(ctx context.Context, k int) error {
		start := time.Since(t0)
		r, err := c.GetRange(ctx, k)
		if err != nil {
			return err
		}
		mu.Lock()
		got = append(got, timedRange{r, start, time.Since(t0)})
		mu.Unlock()
		return nil
	}
	phase := func(n int) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for i := range n {
					if err := call(ctx, []int{2, 16, 300, 5000}[(g+i)%4]); err != nil {
						t.Errorf("GetRange: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	phase(100)
	stop()
	startServer(t, server.Config{Mode: spec.ModeFaSST, Data: dir, Admin: a.Admin, ProviderOpts: faults})
	phase(100)
	if t.Failed() {
		return
	}
	n := checkRanges(t, got)
	st := c.Stats()
	t.Logf("%d ranges, %d values; client retransmits %d, stale %d, reconnects %d", len(got), n, st.Retransmits, st.StaleAnswers, st.Reconnects)
	if st.Retransmits == 0 || st.Reconnects == 0 {
		t.Fatalf("no retransmission (%d) or no reconnect (%d): the faults were not exercised", st.Retransmits, st.Reconnects)
	}
}

// TestGetRangeUnsupported: a mode whose request asks for one value
// refuses ranges with ErrUnsupported, serves k = 1, and keeps serving
// timestamps; bad counts are ErrConfig.
func TestGetRangeUnsupported(t *testing.T) {
	a := startServer(t, server.Config{Mode: spec.ModeSpecS0})
	c := dialT(t, a.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.GetRange(ctx, 2); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("GetRange(2) in spec-s0 = %v, want ErrUnsupported", err)
	}
	r, err := c.GetRange(ctx, 1)
	if err != nil || r.Count != 1 || r.Last() != r.First {
		t.Fatalf("GetRange(1) = %+v, %v", r, err)
	}
	ts, err := c.GetTimestamp(ctx)
	if err != nil || ts <= r.First {
		t.Fatalf("GetTimestamp = %v, %v after %v", ts, err, r.First)
	}
	for _, k := range []int{0, -1, MaxRange + 1} {
		if _, err := c.GetRange(ctx, k); !errors.Is(err, ErrConfig) {
			t.Errorf("GetRange(%d) = %v, want ErrConfig", k, err)
		}
	}
}

// TestFaSSTRangeMatching drives range requests against a scripted
// server: a range is a request of its own for k values beyond the
// window, its retransmission asks for the same k under a fresh ID, an
// answer with another count is stale, the answer's first value is the
// result, and a range counts against the window's requests, not values.
func TestFaSSTRangeMatching(t *testing.T) {
	f, tr, st := newFaSSTFake(t, 2)
	dst := tr.qps[0].qp.QPN()
	if ok, err := tr.SendRange(0, 0, 1000); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h1 := f.request(t)
	if h1.Count != 1000 {
		t.Fatalf("range request for %d values, want 1000", h1.Count)
	}
	if tr.Free() != 2 || tr.Outstanding() != 1 {
		t.Fatalf("free %d outstanding %d: a range takes a request, not values", tr.Free(), tr.Outstanding())
	}
	if ok, _ := tr.SendRange(0, 1, 5); !ok {
		t.Fatal("second range refused with a window of 2")
	}
	f.request(t)
	if tr.Free() != 0 {
		t.Fatalf("free %d with the window's 2 requests in flight", tr.Free())
	}
	if ok, _ := tr.SendRange(0, 2, 5); ok {
		t.Fatal("a third request in flight with a window of 2")
	}
	tr.Cancel(1)
	if n := tr.Expire(time.Hour); n != 1 {
		t.Fatalf("expire resent %d", n)
	}
	h2 := f.request(t)
	if h2.ID == h1.ID || h2.Count != 1000 {
		t.Fatalf("retransmission %+v after %+v: want a fresh ID and the same 1000 values", h2, h1)
	}
	res := make([]result, 4)
	f.answer(t, f.end, f.ah, dst, 1000, h1.ID, 5000) // stale: an earlier ID
	f.answer(t, f.end, f.ah, dst, 999, h2.ID, 6000)  // stale: another count
	f.answer(t, f.end, f.ah, dst, 1000, h2.ID, 7000)
	got := pollFor(t, tr, res, 1)
	if got[0] != (result{ID: 0, Value: 7000}) {
		t.Fatalf("results %+v, want ID 0 at 7000", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.stale.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("stale %d, want 2", st.stale.Load())
		}
		tr.Poll(0, res)
	}
	if tr.Outstanding() != 0 || tr.Free() != 2 {
		t.Fatalf("after: outstanding %d free %d", tr.Outstanding(), tr.Free())
	}
	// Coalesced callers and a range share the window's requests.
	if n, _ := tr.Send(0, []int{1}); n != 1 {
		t.Fatal(n)
	}
	if ok, _ := tr.SendRange(0, 0, 7); !ok {
		t.Fatal("range refused beside one request")
	}
	if tr.Free() != 0 {
		t.Fatalf("free %d with 2 requests in flight", tr.Free())
	}
}
