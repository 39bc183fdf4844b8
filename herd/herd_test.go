package herd

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"context"
	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var errBehind = errors.New("behind")

// fakeOracle counts up from 1<<40 and refuses every behindEvery-th claim.
type fakeOracle struct {
	mu          sync.Mutex
	next        uint64
	calls       int
	behindEvery int
	delay       atomic.Int64 // a claim that succeeds this late (ns)
}

func (o *fakeOracle) Claim(n int) (uint64, error) {
	if d := time.Duration(o.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.behindEvery > 0 && o.calls%o.behindEvery == 0 {
		return 0, errBehind
	}
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func open(t testing.TB, opts string) verbs.Device {
	t.Helper()
	o, err := verbs.ParseOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open("soft", "127.0.0.1:0", o)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type rig struct {
	srv  *Server
	cli  verbs.Device // the client's device
	conn *Conn
	pd   verbs.PD
	orc  *fakeOracle
	t0   time.Time
}

func newRig(t testing.TB, srvOpts, cliOpts string, qps, window int) *rig {
	t.Helper()
	r := &rig{orc: &fakeOracle{behindEvery: 7}, t0: time.Now()}
	var err error
	r.srv, err = New(Config{Config: wk.Config{Device: open(t, srvOpts), Oracle: r.orc, Behind: errBehind, Workers: 2}, MaxWindow: 32, MaxQPs: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	dev := open(t, cliOpts)
	r.cli = dev
	if r.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if r.conn, err = NewConn(r.pd, dev, qps, window, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close(); r.pd.Close() })
	g, err := admit(r.srv, "test", r.conn.QPs(), window)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.conn.Attach(g); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) now() time.Duration { return time.Since(r.t0) }

// run issues total requests, window at a time, and returns the values in
// completion order, checking each completion against the requests
// outstanding when it was sent.
func (r *rig) run(t testing.TB, total int) []uint64 {
	t.Helper()
	ids := make([]int, r.conn.Free())
	res := make([]Result, 64)
	var out []uint64
	floor := map[int]uint64{} // id -> largest value returned before it was sent
	var maxRet uint64
	sent := 0
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d answered before the deadline (stats %+v)", len(out), total, r.srv.totals())
		}
		now := r.now()
		if want := min(r.conn.Free(), total-sent); want > 0 {
			n, err := r.conn.Send(now, ids[:want])
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[:n] {
				floor[id] = maxRet
			}
			sent += n
		}
		n := r.conn.Poll(now, res)
		for _, x := range res[:n] {
			if x.Value <= floor[x.ID] {
				t.Fatalf("request %d got %d, not above %d returned before it was sent", x.ID, x.Value, floor[x.ID])
			}
			maxRet = max(maxRet, x.Value)
			out = append(out, x.Value)
		}
		r.conn.Expire(now)
	}
	return out
}

func checkUnique(t testing.TB, vs []uint64) {
	t.Helper()
	seen := make(map[uint64]bool, len(vs))
	for _, v := range vs {
		if seen[v] {
			t.Fatalf("value %d handed out twice", v)
		}
		seen[v] = true
	}
}

func TestServeClean(t *testing.T) {
	r := newRig(t, "", "", 2, 8)
	vs := r.run(t, 3000)
	checkUnique(t, vs)
	st := r.srv.totals()
	if st.Requests < 3000 || st.Batches == 0 {
		t.Fatalf("server stats %+v", st)
	}
	if st.Batches >= st.Requests {
		t.Logf("no batching seen: %+v", st)
	}
}

func TestServeFaults(t *testing.T) {
	opts := "loss=0.05,dup=0.05,reorder=0.05,seed=3"
	r := newRig(t, opts, opts, 2, 8)
	vs := r.run(t, 2000)
	checkUnique(t, vs)
	st := r.srv.totals()
	t.Logf("server %+v client retransmits=%d stale=%d", st, r.conn.Retransmits, r.conn.Stale)
	if r.conn.Retransmits == 0 {
		t.Errorf("5%% loss but no retransmission")
	}
	// Whether a duplicated WRITE is seen as a duplicate depends on timing
	// (a copy that lands before the server polls the slot just rewrites
	// it); that duplicates were injected is what makes the run count.
	var duplicated uint64
	r.cli.(verbs.Counters).VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterInjectedDup {
			duplicated = v
		}
	})
	if duplicated == 0 {
		t.Errorf("5%% duplication but the client's provider duplicated nothing")
	}
	t.Logf("duplicates injected by the client: %d, seen by the server: %d", duplicated, st.Duplicates)
}

// TestNeverAnswersTwice writes the same (slot, seq) twice: the server
// answers once and counts a duplicate.
func TestNeverAnswersTwice(t *testing.T) {
	r := newRig(t, "", "", 1, 1)
	ids := make([]int, 1)
	if n, err := r.conn.Send(r.now(), ids); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	q := r.conn.qps[0]
	res := make([]Result, 4)
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no answer")
		}
		got += r.conn.Poll(r.now(), res)
		if st := r.srv.totals(); got == 0 && st.Drops["expired"]+st.Drops["late"] > 0 {
			// Dropped by age (a loaded machine overslept the idle
			// worker's sweep): retransmit, as a client does.
			r.conn.Expire(r.now())
		}
	}
	// Replay the very same WRITE (same seq) and wait until the server has
	// seen it.
	wr := q.wrs[0]
	wr.Flags = verbs.Inline | verbs.Signaled
	if _, err := q.uc.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	for r.srv.totals().Duplicates == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("duplicate never seen: %+v", r.srv.totals())
		}
		time.Sleep(time.Millisecond)
	}
	// The position is free; a stale answer would be counted, not returned.
	if n := r.conn.Poll(r.now(), res); n != 0 {
		t.Fatalf("got %d answers to a replayed WRITE", n)
	}
	if st := r.srv.totals(); st.Requests != 1 {
		t.Fatalf("server answered %d requests, want 1", st.Requests)
	}
}

// TestStopMovesToErr: after Stop, writes get no answer and admission fails.
func TestStopMovesToErr(t *testing.T) {
	r := newRig(t, "", "", 1, 4)
	r.run(t, 10)
	if _, err := r.srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ids := make([]int, 4)
	if _, err := r.conn.Send(r.now(), ids); err != nil {
		t.Fatal(err)
	}
	served := r.srv.totals().Requests
	res := make([]Result, 4)
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) {
		if n := r.conn.Poll(r.now(), res); n != 0 {
			t.Fatalf("answer after Stop: %+v", res[:n])
		}
	}
	if got := r.srv.totals().Requests; got != served {
		t.Fatalf("served %d after Stop", got-served)
	}
	if _, err := admit(r.srv, "late", r.conn.QPs(), 4); !errors.Is(err, ErrClosed) {
		t.Fatalf("Admit after Stop = %v", err)
	}
}

func TestAdmitRelease(t *testing.T) {
	srv, err := New(Config{Config: wk.Config{Device: open(t, ""), Oracle: &fakeOracle{}}, MaxQPs: 1, MaxWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := admit(srv, "x", nil, 4); !errors.Is(err, ErrArgument) {
		t.Fatalf("Admit(no QPs) = %v", err)
	}
	dev := open(t, "")
	pd, _ := dev.AllocPD()
	defer pd.Close()
	c1, _ := NewConn(pd, dev, 1, 4, time.Millisecond)
	defer c1.Close()
	c2, _ := NewConn(pd, dev, 1, 4, time.Millisecond)
	defer c2.Close()
	g, err := admit(srv, "a", c1.QPs(), 100)
	if err != nil || g.Window != 4 {
		t.Fatalf("Admit = %+v, %v", g, err)
	}
	if _, err := admit(srv, "b", c2.QPs(), 4); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("Admit over capacity = %v", err)
	}
	if err := srv.Release(context.Background(), dataplane.SessionRef{ID: g.Session}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Release(context.Background(), dataplane.SessionRef{ID: g.Session}); !errors.Is(err, ErrNoSession) {
		t.Fatalf("double Release = %v", err)
	}
	// The block comes back once the worker has swept past the release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err = admit(srv, "b", c2.QPs(), 4); err == nil {
			break
		}
		if !errors.Is(err, ErrNoRoom) || time.Now().After(deadline) {
			t.Fatalf("Admit after Release = %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	_ = spec.SlotLen
}

// admit admits qps through the server's dataplane.Mode API and returns
// the grant as Conn takes it.
func admit(srv *Server, name string, qps []ClientQP, window int) (Grant, error) {
	a := dataplane.Admission{Name: name, Window: window}
	for _, q := range qps {
		a.QPs = append(a.QPs, dataplane.Endpoint(q.Recv))
		a.ConnQPs = append(a.ConnQPs, dataplane.Endpoint(q.Write))
	}
	dg, err := srv.Admit(context.Background(), a, dataplane.SessionRef{})
	if err != nil {
		return Grant{}, err
	}
	g := Grant{Session: dg.Session, QKey: dg.AnswerQKey, Window: dg.Window, Epoch: dg.Epoch}
	for i, e := range dg.ServerConnQPs {
		g.QPs = append(g.QPs, QPGrant{Server: Endpoint(e), Addr: dg.RemoteAddr[i], RKey: dg.RKey[i]})
	}
	for _, e := range dg.AnswerQPs {
		g.AnswerFrom = append(g.AnswerFrom, verbs.SenderOf(e.Addr, e.QPN))
	}
	return g, nil
}
