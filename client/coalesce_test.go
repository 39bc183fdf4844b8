package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// coRig is a coalescer over a fake engine: send records the requests
// it is handed, and the test completes them (answer or fail), as the
// engine would, by calling their Callback.
type coRig struct {
	q     coalescer
	st    stats
	pool  sync.Pool
	clock time.Duration
	sent  []*Request
	fail  error // send's error
}

func newCoRig(depth int) *coRig {
	g := &coRig{}
	g.pool.New = func() any { return &Request{Done: make(chan *Request, 1), pooled: true} }
	g.q.init(depth, coalesceEnv{send: g.send, now: func() time.Duration { return g.clock },
		defTimeout: time.Second, start: time.Now(), pool: &g.pool, st: &g.st})
	g.q.ranged.Store(true)
	return g
}

func (g *coRig) send(r *Request) error {
	if g.fail != nil {
		return g.fail
	}
	g.st.requests.Add(1) // the engine's begin
	g.sent = append(g.sent, r)
	return nil
}

// complete completes the i-th request sent, as the engine's finish
// does, with the first value v or err.
func (g *coRig) complete(i int, v Timestamp, err error) {
	r := g.sent[i]
	r.TS, r.Err = v, err
	g.st.completed.Add(1)
	if err != nil {
		g.st.failed.Add(1)
	} else {
		g.st.answers.Add(1)
	}
	r.Callback(r)
}

// caller is a submitted member and what it got.
type caller struct {
	req  Request
	got  []Timestamp
	errs []error
}

func (g *coRig) caller() *caller {
	c := &caller{}
	c.req.Callback = func(r *Request) {
		if r.Err != nil {
			c.errs = append(c.errs, r.Err)
			return
		}
		c.got = append(c.got, r.TS)
	}
	return c
}

// TestCoalesceSplit: callers who come while a request is in flight go
// out as one ranged request of k = how many waited; its values are
// split among them in arrival order, each value to one caller, and every
// caller is answered exactly once.
func TestCoalesceSplit(t *testing.T) {
	g := newCoRig(1)
	cs := make([]*caller, 6)
	for i := range cs {
		cs[i] = g.caller()
		if err := g.q.submit(&cs[i].req); err != nil {
			t.Fatal(err)
		}
	}
	// The first went out at once, alone; the others wait.
	if len(g.sent) != 1 || g.sent[0].n != 1 {
		t.Fatalf("sent %d requests (first n=%d), want 1 of one value", len(g.sent), g.sent[0].n)
	}
	g.complete(0, 100, nil)
	if len(g.sent) != 2 || g.sent[1].n != 5 {
		t.Fatalf("after the first answer: %d requests, the second for %d values; want 2, the second for 5", len(g.sent), g.sent[1].n)
	}
	g.complete(1, 200, nil)
	want := []Timestamp{100, 200, 201, 202, 203, 204}
	for i, c := range cs {
		if len(c.got) != 1 || len(c.errs) != 0 || c.got[0] != want[i] {
			t.Errorf("caller %d got %v, errors %v; want only %d", i, c.got, c.errs, want[i])
		}
	}
	if len(g.sent) != 2 {
		t.Errorf("%d requests sent for nothing waiting", len(g.sent))
	}
	st := snapshotStats(&g.st)
	if st.Requests != 6 || st.Completed != 6 || st.Answers != 6 || st.Failed != 0 {
		t.Errorf("stats %+v: want 6 requests, answers and completions", st)
	}
}

// TestCoalesceManyRandom: rounds of callers resubmitting from their own
// callbacks (as loadgen's driver does), batches answered with values
// from a counter: every value handed out once, each caller's values
// increasing, every call answered.
func TestCoalesceManyRandom(t *testing.T) {
	for _, depth := range []int{1, 3} {
		t.Run(fmt.Sprint("depth=", depth), func(t *testing.T) {
			g := newCoRig(depth)
			const callers, rounds = 50, 40
			seen := map[Timestamp]int{}
			left := make([]int, callers)
			next := Timestamp(1)
			for i := range callers {
				left[i] = rounds
				c := &caller{}
				c.req.Callback = func(r *Request) {
					if r.Err != nil {
						t.Fatalf("caller %d: %v", i, r.Err)
					}
					if p, dup := seen[r.TS]; dup {
						t.Fatalf("value %d to callers %d and %d", r.TS, p, i)
					}
					seen[r.TS] = i
					if n := len(c.got); n > 0 && c.got[n-1] >= r.TS {
						t.Fatalf("caller %d: %d after %d", i, r.TS, c.got[n-1])
					}
					c.got = append(c.got, r.TS)
					if left[i]--; left[i] > 0 {
						if err := g.q.submit(r); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := g.q.submit(&c.req); err != nil {
					t.Fatal(err)
				}
			}
			// Answer the oldest request in flight, in turn, until none is.
			for done := 0; done < len(g.sent); done++ {
				if inflight := len(g.sent) - done; inflight > depth {
					t.Fatalf("%d requests in flight, depth %d", inflight, depth)
				}
				k := max(g.sent[done].n, 1)
				g.complete(done, next, nil)
				next += Timestamp(k)
			}
			if len(seen) != callers*rounds {
				t.Fatalf("%d values handed out, want %d", len(seen), callers*rounds)
			}
			if len(g.sent) >= callers*rounds/4 {
				t.Errorf("%d requests for %d calls: not coalesced", len(g.sent), callers*rounds)
			}
			t.Logf("%d calls in %d requests", callers*rounds, len(g.sent))
		})
	}
}

// TestCoalesceFailure: a batch that times out fails the callers whose
// own deadline passed and sends the others again in the next batch; one
// failing otherwise fails every caller; a mode without ranges sends each
// caller alone. No caller is completed twice or left waiting.
func TestCoalesceFailure(t *testing.T) {
	g := newCoRig(1)
	first := g.caller()
	if err := g.q.submit(&first.req); err != nil {
		t.Fatal(err)
	}
	short, long := g.caller(), g.caller()
	short.req.Deadline = g.q.env.start.Add(10 * time.Millisecond)
	for _, c := range []*caller{short, long} {
		if err := g.q.submit(&c.req); err != nil {
			t.Fatal(err)
		}
	}
	g.complete(0, 1, nil)
	b := g.sent[1]
	if b.n != 2 || b.Deadline.Sub(g.q.env.start) != 10*time.Millisecond {
		t.Fatalf("batch of %d, deadline %v: want 2, the earliest caller's (10ms)", b.n, b.Deadline.Sub(g.q.env.start))
	}
	g.clock = 10 * time.Millisecond
	g.complete(1, 0, fmt.Errorf("%w: no answer", ErrTimeout))
	if len(short.errs) != 1 || !errors.Is(short.errs[0], ErrTimeout) || len(short.got) != 0 {
		t.Errorf("short deadline: got %v, errors %v; want one ErrTimeout", short.got, short.errs)
	}
	if len(long.errs) != 0 || len(long.got) != 0 {
		t.Fatalf("long deadline: got %v, errors %v; want still waiting", long.got, long.errs)
	}
	if len(g.sent) != 3 || g.sent[2].n != 1 {
		t.Fatalf("the caller whose deadline did not pass was not sent again (%d requests)", len(g.sent))
	}
	// Now a failure that is not a timeout: every caller fails with it.
	a, c := g.caller(), g.caller()
	g.q.submit(&a.req)
	g.q.submit(&c.req)
	bad := fmt.Errorf("%w: boom", ErrRegression)
	g.complete(2, 0, bad)
	if len(long.errs) != 1 || !errors.Is(long.errs[0], ErrRegression) {
		t.Errorf("long: errors %v, want the batch's", long.errs)
	}
	// a and c went out as the next batch; the mode switched away from
	// ranges: each is sent alone.
	if len(g.sent) != 4 || g.sent[3].n != 2 {
		t.Fatalf("want a batch of 2, sent %d", len(g.sent))
	}
	g.complete(3, 0, fmt.Errorf("%w: no ranges", ErrUnsupported))
	if len(g.sent) != 6 || g.sent[4] != &a.req || g.sent[5] != &c.req {
		t.Fatalf("after ErrUnsupported: %d requests, want the 2 callers sent alone", len(g.sent))
	}
	// The engine answers them alone, on their own callbacks.
	g.complete(4, 50, nil)
	g.complete(5, 51, nil)
	for _, x := range []*caller{a, c} {
		if len(x.got) != 1 || len(x.errs) != 0 {
			t.Errorf("got %v, errors %v; want one value", x.got, x.errs)
		}
	}
	// The client closes: send fails. A lone Submit gets the error back
	// (and no callback), a queued caller gets it on its callback.
	g.fail = ErrNotConnected
	lone := g.caller()
	if err := g.q.submit(&lone.req); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Submit on a closed client: %v", err)
	}
	if len(lone.errs)+len(lone.got) != 0 {
		t.Errorf("a Submit that failed was also completed: %v %v", lone.got, lone.errs)
	}
	g.fail = nil
	inFlight, queued := g.caller(), g.caller()
	g.q.submit(&inFlight.req)
	g.q.submit(&queued.req)
	g.fail = ErrNotConnected
	g.complete(len(g.sent)-1, 0, ErrNotConnected)
	if len(inFlight.errs) != 1 || len(queued.errs) != 1 || !errors.Is(queued.errs[0], ErrNotConnected) {
		t.Errorf("close: in flight %v, queued %v; want ErrNotConnected each", inFlight.errs, queued.errs)
	}
	st := snapshotStats(&g.st)
	if st.InFlight() != 0 || g.q.inflight != 0 || g.q.head != nil {
		t.Errorf("left: stats %+v in flight, coalescer %d in flight, queue %v", st.InFlight(), g.q.inflight, g.q.head)
	}
}

// TestCoalesceLoneNoWait: a lone caller is sent before Submit returns,
// alone, whatever came before it completed: no timer, no wait for
// company.
func TestCoalesceLoneNoWait(t *testing.T) {
	g := newCoRig(1)
	for i := range 3 {
		c := g.caller()
		if err := g.q.submit(&c.req); err != nil {
			t.Fatal(err)
		}
		if len(g.sent) != i+1 || g.sent[i].n != 1 {
			t.Fatalf("call %d: %d requests sent when Submit returned, want %d", i, len(g.sent), i+1)
		}
		g.complete(i, Timestamp(10+i), nil)
		if len(c.got) != 1 {
			t.Fatalf("call %d not answered", i)
		}
	}
	if !g.q.join(&Request{}) {
		t.Fatal("a lone GetTimestamp caller was queued")
	}
}

// TestCoalesceAllocs: a round of coalesced calls allocates nothing once
// the batch has grown.
func TestCoalesceAllocs(t *testing.T) {
	g := newCoRig(1)
	g.sent = make([]*Request, 0, 4096)
	cs := make([]*caller, 32)
	for i := range cs {
		cs[i] = &caller{}
		cs[i].req.Callback = func(*Request) {}
	}
	round := func() {
		g.sent = g.sent[:0]
		for _, c := range cs {
			g.q.submit(&c.req)
		}
		g.complete(0, 1, nil)
		g.complete(1, 2, nil)
	}
	round()
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%.1f allocs per round of %d calls", a, len(cs))
	}
}

func snapshotStats(s *stats) Stats {
	return Stats{Requests: s.requests.Load(), Answers: s.answers.Load(), Completed: s.completed.Load(), Failed: s.failed.Load()}
}

// TestCoalesceFaSST: many goroutines calling GetTimestamp through a
// fasst server, with coalescing on and off, on QPs of window 1 (so that
// the transport can put no two callers in one request): every call's
// value checked by loadgen's verifier (unique, each caller's increasing,
// real-time order); on, fewer requests reach the server than calls (they
// were coalesced), off, one each. Then a lone caller drives the engine
// itself, as without coalescing.
func TestCoalesceFaSST(t *testing.T) {
	a := startServer(t, server.Config{Mode: spec.ModeFaSST, Workers: 2, MaxWindow: 64})
	const goroutines, calls = 64, 300
	for _, on := range []bool{true, false} {
		opts := []Option{WithQPs(4), WithWindow(1)}
		if !on {
			opts = append(opts, WithCoalescing(0))
		}
		c := dialT(t, a.Admin, opts...)
		if c.co.active() != on {
			t.Fatalf("coalescing active %v in mode %s, want %v", c.co.active(), c.Mode(), on)
		}
		before := serverRequests(t, c)
		hammer(t, c, goroutines, calls)
		st := c.Stats()
		srv := serverRequests(t, c) - before
		t.Logf("coalescing %v: %d calls; client: %d requests, %d answers; server: %d requests", on, goroutines*calls, st.Requests, st.Answers, srv)
		if st.Requests != goroutines*calls || st.Answers != goroutines*calls || st.InFlight() != 0 {
			t.Errorf("stats count calls: %d requests, %d answers, %d in flight; want %d, %d, 0", st.Requests, st.Answers, st.InFlight(), goroutines*calls, goroutines*calls)
		}
		if on && srv >= goroutines*calls/4 {
			t.Errorf("server received %d requests for %d calls: not coalesced", srv, goroutines*calls)
		}
		if !on && srv < goroutines*calls {
			t.Errorf("coalescing off: server received %d requests for %d calls", srv, goroutines*calls)
		}
		if !on {
			continue
		}
		// A lone caller: it drives the engine itself (the path without
		// coalescing), no hand-off, no wait.
		driven := c.st.driven.Load()
		for range 10 {
			if _, err := c.GetTimestamp(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if d := c.st.driven.Load() - driven; d == 0 {
			t.Errorf("no lone call of 10 drove the engine itself")
		}
	}
}

// hammer makes calls GetTimestamp calls on each of goroutines goroutines
// and checks the history with loadgen's verifier.
func hammer(t *testing.T, c *Client, goroutines, calls int) {
	t.Helper()
	base := time.Now()
	hist := make([][]verify.Call, goroutines)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for range calls {
				start := time.Since(base)
				ts, err := c.GetTimestamp(ctx)
				end := time.Since(base)
				if err != nil {
					failed.Add(1)
					t.Error(err)
					return
				}
				hist[i] = append(hist[i], verify.Call{Start: start, End: end, Value: uint64(ts)})
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	rp := verify.Check(hist, 3)
	if err := rp.Err(); err != nil || rp.Calls != goroutines*calls {
		t.Fatalf("verify: %v (%d calls checked, want %d)", err, rp.Calls, goroutines*calls)
	}
}

// serverRequests is the packets the server's provider received (its
// Status): the requests sent to it.
func serverRequests(t testing.TB, c *Client) uint64 {
	t.Helper()
	st, err := c.admin.adm.Status(context.Background(), &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := st.GetProviderCounters()[verbs.CounterRxPackets]
	if !ok {
		t.Skip("the server's provider counts no received packets")
	}
	return n
}

// BenchmarkCoalesced: GetTimestamp from parallel goroutines (64 per
// GOMAXPROCS) against one fasst server, coalescing on and off (QPs of
// window 1, so that off is one request per call), in one run; requests/op
// is what reached the server per call. 0 allocs/op on both paths.
//
//	go test -run '^$' -bench Coalesced -benchtime 3s ./client/
func BenchmarkCoalesced(b *testing.B) {
	a := startServer(b, server.Config{Mode: spec.ModeFaSST})
	for _, n := range []int{1, 0} {
		name := "on"
		if n == 0 {
			name = "off"
		}
		b.Run(name, func(b *testing.B) {
			c := dialT(b, a.Admin, WithQPs(16), WithWindow(1), WithCoalescing(n))
			ctx := context.Background()
			for range 100 {
				if _, err := c.GetTimestamp(ctx); err != nil {
					b.Fatal(err)
				}
			}
			before := serverRequests(b, c)
			b.SetParallelism(64)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.GetTimestamp(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(serverRequests(b, c)-before)/float64(b.N), "requests/op")
		})
	}
}

// TestFaSSTSingle: with coalescing off the fasst transport sends every
// caller as a request of its own, filling each QP's window; on, one
// request per QP carries them all. Then both serve a run of calls
// (unique values).
func TestFaSSTSingle(t *testing.T) {
	for _, single := range []bool{true, false} {
		r := newFaSSTRig(t, "", "", 2, 8)
		r.tr.single = single
		ids := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
		took, err := r.tr.Send(r.now(), ids)
		if err != nil || took != len(ids) {
			t.Fatalf("single %v: Send took %d of %d: %v", single, took, len(ids), err)
		}
		var counts []int
		for _, q := range r.tr.qps {
			for s := range q.due {
				if q.due[s].busy {
					counts = append(counts, q.slots.Count(s))
				}
			}
		}
		want := []int{8, 4} // one request per QP, as many values as fit
		if single {
			want = slices.Repeat([]int{1}, len(ids))
		}
		if !slices.Equal(counts, want) {
			t.Errorf("single %v: requests of %v values, want %v", single, counts, want)
		}
		for _, id := range ids {
			r.tr.Cancel(id)
		}
		checkUnique(t, drive(t, r.tr, r.st, 2000, r.now))
	}
}
