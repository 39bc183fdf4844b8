package client

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/erpc"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

type erpcRig struct {
	srv *erpc.Server
	tr  *erpcTransport
	st  *stats
	t0  time.Time
}

// newERPCRig starts an erpc server and admits a transport of qps QPs
// with credits to it directly.
func newERPCRig(t testing.TB, srvOpts, cliOpts string, qps, credits int) *erpcRig {
	t.Helper()
	srv, err := erpc.New(erpc.Config{Config: wk.Config{Device: openSoft(t, srvOpts), Oracle: &fakeOracle{BehindEvery: 7},
		Behind: errBehind, Workers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	dev := openSoft(t, cliOpts)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	r := &erpcRig{srv: srv, st: &stats{}, t0: time.Now()}
	if r.tr, err = newERPC(pd, dev, qps, credits, spec.ERPCDefaultRTO, r.st); err != nil {
		t.Fatal(err)
	}
	r.tr.arrived = newArrivals(&transportEnv{dev: dev, start: r.t0})
	t.Cleanup(func() { r.tr.Close() })
	a := handshake.Admission{Name: "test", Window: credits}
	for _, q := range r.tr.qps {
		a.QPs = append(a.QPs, endpointOf(q.qp))
	}
	g, err := srv.Admit(context.Background(), a, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.tr.attach(g); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *erpcRig) now() time.Duration { return time.Since(r.t0) }

func TestERPCServe(t *testing.T) {
	r := newERPCRig(t, "", "", 2, 8)
	checkUnique(t, drive(t, r.tr, r.st, 4000, r.now))
	if o := r.tr.Outstanding(); o != 0 {
		t.Errorf("%d outstanding after every call was answered", o)
	}
	// At most once: the values of the answers posted are the calls',
	// each run once (a resend claims nothing). Served subtracts the
	// answers the provider failed or held past their deadline (drops
	// late and send_error), whose retransmissions were answered from
	// their slots; each such answer carried at most erpcMaxCoalesce
	// values, one per caller the request carried (CI once saw 5 unsent
	// answers of 64 values each, 3,680 served, against a bound of 8
	// values an answer).
	// A worker counts a burst just after its doorbell, so the last
	// answers can reach the client first: wait for the count.
	unsent := func(st dataplane.Stats) (n uint64) {
		for _, c := range st.Counters {
			if c.Name == "drops_total" && (c.Reason == "late" || c.Reason == "send_error") {
				n += c.Value
			}
		}
		return n
	}
	st := r.srv.Stats()
	for deadline := time.Now().Add(5 * time.Second); st.Served+erpcMaxCoalesce*unsent(st) < 4000 && time.Now().Before(deadline); st = r.srv.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.Served > 4000 || st.Served+erpcMaxCoalesce*unsent(st) < 4000 {
		t.Fatalf("server served %d values for 4000 calls, %d answers unsent", st.Served, unsent(st))
	}
	if r.tr.Broken() {
		t.Fatal("transport broken with the server up")
	}
}

// TestERPCRetransmissionUnderLoss: with a fifth of the packets lost and
// a tenth duplicated both ways, every call completes with a unique value;
// retransmissions happen and the server answers them from their slots,
// so that the values it claimed are at most one request's per request
// number (the calls, here) — were a retransmission run again, it would
// claim more — and no duplicate answer carries another value.
func TestERPCRetransmissionUnderLoss(t *testing.T) {
	const faults = "loss=0.2,dup=0.1,seed=5"
	r := newERPCRig(t, faults, faults, 2, 8)
	const calls = 2000
	checkUnique(t, drive(t, r.tr, r.st, calls, r.now))
	st := r.srv.Stats()
	resends := counter(st, "resends_total", "")
	t.Logf("client retransmits %d, stale %d; server served %d values, resent %d answers from their slots, dropped busy %d stale %d",
		r.st.retransmits.Load(), r.st.stale.Load(), st.Served, resends, counter(st, "drops_total", "busy"), counter(st, "drops_total", "stale"))
	if r.st.retransmits.Load() == 0 || resends == 0 {
		t.Fatalf("client retransmits %d, server resends %d: the loss was not exercised", r.st.retransmits.Load(), resends)
	}
	if st.Served > calls {
		t.Fatalf("the server claimed %d values for %d request numbers: a retransmission ran again", st.Served, calls)
	}
	if n := r.tr.Reanswered(); n != 0 {
		t.Fatalf("%d answers repeated a request number with another value", n)
	}
}

// TestERPCEndToEnd: GetTimestamp and GetRange through a seqd in mode
// erpc on the soft provider, from 4 callers, checked by the verifier.
func TestERPCEndToEnd(t *testing.T) {
	a := startServer(t, server.Config{Mode: spec.ModeERPC, Workers: 2})
	c := dialT(t, a.Admin, WithQPs(2))
	if c.Mode() != spec.ModeERPC {
		t.Fatalf("mode %q", c.Mode())
	}
	var h verify.History
	callers(t, c, &h, time.Now(), 0, 4, 500)
	if r := h.Check(); !r.OK() || r.Calls != 2000 {
		t.Fatalf("%d calls: %v", r.Calls, r.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rg, err := c.GetRange(ctx, 100)
	if err != nil || rg.Count != 100 {
		t.Fatalf("GetRange(100) = %+v, %v", rg, err)
	}
}

// callers runs n GetTimestamp calls from each of k goroutines (callers
// base, base+1, ...) and records them in h, timed from t0.
func callers(t *testing.T, c *Client, h *verify.History, t0 time.Time, base, k, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for range n {
				start := time.Since(t0)
				ts, err := c.GetTimestamp(ctx)
				if err != nil {
					t.Errorf("GetTimestamp: %v", err)
					return
				}
				h.Record(base+g, verify.Call{Start: start, End: time.Since(t0), Value: uint64(ts)})
			}
		}()
	}
	wg.Wait()
}

// TestERPCServerRestart: seqd stops under load and starts again on the
// same data and admin address: the client finds the server gone (its
// sessions hear nothing), reconnects on its own, and every call is
// served, verified across the restart.
func TestERPCServerRestart(t *testing.T) {
	dir := t.TempDir()
	a, stop := startStoppable(t, server.Config{Mode: spec.ModeERPC, Data: dir})
	c := dialT(t, a.Admin)
	var h verify.History
	t0 := time.Now()
	callers(t, c, &h, t0, 0, 2, 200)
	stop()
	startServer(t, server.Config{Mode: spec.ModeERPC, Data: dir, Admin: a.Admin})
	callers(t, c, &h, t0, 2, 2, 200)
	if r := h.Check(); !r.OK() || r.Calls != 800 {
		t.Fatalf("%d calls: %v", r.Calls, r.Err())
	}
	st := c.Stats()
	if st.Reconnects == 0 {
		t.Fatalf("no reconnect across the restart: %+v", st)
	}
	t.Logf("reconnects %d, retransmits %d", st.Reconnects, st.Retransmits)
}

// TestERPCServerDeath: the server goes away with a request in flight;
// the transport resends it every RTO (go-back-N) and breaks once
// spec.ERPCFailAfter passed with nothing heard, well within 500 ms of
// the server's death, so the engine reconnects. The clock is the
// test's.
func TestERPCServerDeath(t *testing.T) {
	r := newERPCRig(t, "", "", 1, 8)
	if n, err := r.tr.Send(r.now(), []int{0}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	res := make([]result, 4)
	for deadline := time.Now().Add(5 * time.Second); r.tr.Outstanding() > 0; {
		if time.Now().After(deadline) || r.tr.Broken() {
			t.Fatalf("no answer with the server up (broken %v)", r.tr.Broken())
		}
		r.tr.Poll(r.now(), res)
		r.tr.Expire(r.now()) // a request dropped at a loaded server is sent again
	}
	r.srv.Close()
	now := r.now()
	died := now
	r.tr.Send(now, []int{1})
	resent := 0
	for !r.tr.Broken() {
		d, ok := r.tr.NextDeadline()
		if !ok {
			t.Fatal("no deadline with a request in flight")
		}
		now = d
		r.tr.Poll(now, res)
		resent += r.tr.Expire(now)
		// A packet the server sent before it died can still arrive
		// (a duplicate answer): the session heard it, at the test's
		// clock, and counts from there.
		if from := max(died, r.tr.qps[0].sess.Heard()); now-from > spec.ERPCFailAfter {
			t.Fatalf("not broken %v after the server died, %v after it was last heard", now-died, now-from)
		}
	}
	if from := max(died, r.tr.qps[0].sess.Heard()); now-from >= 500*time.Millisecond || resent == 0 {
		t.Fatalf("broken %v after the server was last heard, %d resends", now-from, resent)
	}
	t.Logf("broken %v after the server died, after %d resends", now-died, resent)
}

// TestERPCConnectRefusedPastCredits: a seqd whose socket receive buffer
// holds a few dozen requests admits erpc sessions of 8 credits while they
// fit and refuses the next Connect with an error naming the credits; the
// sessions admitted are served.
func TestERPCConnectRefusedPastCredits(t *testing.T) {
	a := startServer(t, server.Config{Mode: spec.ModeERPC, ProviderOpts: "rcvbuf=65536"})
	var admitted []*Client
	var refusal error
	for range 64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, a.Admin, WithQPs(1), WithWindow(8), WithLogger(slog.New(slog.DiscardHandler)))
		cancel()
		if err != nil {
			refusal = err
			break
		}
		t.Cleanup(func() { c.Close() })
		admitted = append(admitted, c)
	}
	if refusal == nil || len(admitted) == 0 {
		t.Fatalf("%d sessions admitted, refusal %v", len(admitted), refusal)
	}
	if !strings.Contains(refusal.Error(), "credits") {
		t.Fatalf("refusal does not name the credits: %v", refusal)
	}
	t.Logf("%d sessions of 8 credits admitted; then: %v", len(admitted), refusal)
	for _, c := range admitted {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := c.GetTimestamp(ctx); err != nil {
			t.Fatalf("an admitted session: %v", err)
		}
		cancel()
	}
}

// TestERPCSingle: with coalescing off (WithCoalescing(0)) every caller is
// a request of its own, as in fasst (TestFaSSTSingle), so that loadgen's
// -coalesce off compares against no coalescing at all; on, the callers
// one Send takes share a request.
func TestERPCSingle(t *testing.T) {
	for _, single := range []bool{true, false} {
		r := newERPCRig(t, "", "", 2, 8)
		r.tr.single = single
		ids := []int{0, 1, 2, 3, 4, 5}
		took, err := r.tr.Send(r.now(), ids)
		if err != nil || took != len(ids) {
			t.Fatalf("single %v: Send took %d of %d: %v", single, took, len(ids), err)
		}
		requests := map[[2]int]bool{}
		for _, id := range ids {
			w := r.tr.where[id]
			requests[[2]int{w.qi, w.slot}] = true
		}
		want := 1
		if single {
			want = len(ids)
		}
		if len(requests) != want {
			t.Errorf("single %v: %d callers went in %d requests, want %d", single, len(ids), len(requests), want)
		}
		for _, id := range ids {
			r.tr.Cancel(id)
		}
		checkUnique(t, drive(t, r.tr, r.st, 200, r.now))
	}
}
