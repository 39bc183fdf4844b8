package atomics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var errBehind = errors.New("behind")

// fakeOracle counts up from 1<<40; while refuse is set, claims fail.
type fakeOracle struct {
	mu     sync.Mutex
	next   uint64
	refuse bool
}

func (o *fakeOracle) Claim(n int) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refuse {
		return 0, errBehind
	}
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func (o *fakeOracle) ClaimWait(ctx context.Context, n int) (uint64, error) { return o.Claim(n) }

func open(t testing.TB, opts string) verbs.Device {
	t.Helper()
	o, _ := verbs.ParseOptions(opts)
	d, err := verbs.Open("soft", "127.0.0.1:0", o)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type rig struct {
	srv  *Server
	conn *Conn
	orc  *fakeOracle
}

func newRig(t testing.TB, cfg Config, srvOpts, cliOpts string, qps, window int) *rig {
	t.Helper()
	r := &rig{orc: &fakeOracle{}}
	cfg.Device, cfg.Oracle = open(t, srvOpts), r.orc
	var err error
	if r.srv, err = New(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	dev := open(t, cliOpts)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if r.conn, err = NewConn(pd, dev, qps, window); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close(); pd.Close() })
	g, err := admit(r.srv, "test", r.conn.QPs())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.conn.Attach(g); err != nil {
		t.Fatal(err)
	}
	return r
}

// run takes total values and checks that each is above every value
// returned before it was requested.
func (r *rig) run(t testing.TB, total int) []uint64 {
	t.Helper()
	ids := make([]int, r.conn.Free())
	res := make([]Result, 64)
	floor := map[int]uint64{}
	var maxRet uint64
	var out []uint64
	sent := 0
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < total {
		if time.Now().After(deadline) || r.conn.Broken() {
			t.Fatalf("%d of %d done (broken %v, stats %+v)", len(out), total, r.conn.Broken(), r.srv.lease())
		}
		if want := min(r.conn.Free(), total-sent); want > 0 {
			n, err := r.conn.Send(0, ids[:want])
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[:n] {
				floor[id] = maxRet
			}
			sent += n
		}
		n := r.conn.Poll(0, res)
		for _, x := range res[:n] {
			if x.Err != nil {
				t.Fatal(x.Err)
			}
			if x.Value <= floor[x.ID] {
				t.Fatalf("request %d got %d, not above %d", x.ID, x.Value, floor[x.ID])
			}
			maxRet = max(maxRet, x.Value)
			out = append(out, x.Value)
		}
	}
	return out
}

func checkUnique(t testing.TB, vs []uint64) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, v := range vs {
		if seen[v] {
			t.Fatalf("value %d twice", v)
		}
		seen[v] = true
	}
}

func TestFetchAddClean(t *testing.T) {
	r := newRig(t, Config{}, "", "", 2, 8)
	vs := r.run(t, 2000)
	checkUnique(t, vs)
	high, _ := r.srv.Stop()
	for _, v := range vs {
		if v > high {
			t.Fatalf("value %d above Stop's high %d", v, high)
		}
	}
	if high < 1<<40+1999 {
		t.Fatalf("high %d below the values served", high)
	}
}

func TestFetchAddFaults(t *testing.T) {
	opts := "loss=0.05,dup=0.05,reorder=0.05,seed=5"
	r := newRig(t, Config{}, opts, opts, 2, 8)
	vs := r.run(t, 1000)
	checkUnique(t, vs)
	// Exactly once: with no gaps from failed QPs, the counter moved by
	// exactly the number of values taken.
	if got := r.srv.Next() - 1<<40; got != 1000 {
		t.Fatalf("counter advanced by %d for 1000 requests (an atomic ran twice?)", got)
	}
}

// TestLeaseRenewsAndFences: the monitor renews the lease ahead of the
// counter; when renewals fail and the counter nears the lease's end, the
// QPs are fenced and no value beyond the lease is handed out.
func TestLeaseRenewsAndFences(t *testing.T) {
	r := newRig(t, Config{Block: 64, FenceMargin: 16, Interval: 200 * time.Microsecond}, "", "", 1, 4)
	vs := r.run(t, 300)
	checkUnique(t, vs)
	if st := r.srv.lease(); st.Renewals == 0 {
		t.Fatalf("no renewal after %d values with 64-value leases: %+v", len(vs), st)
	}
	r.orc.mu.Lock()
	r.orc.refuse = true
	r.orc.mu.Unlock()
	hi := r.srv.lease().LeaseHi
	ids := make([]int, 4)
	res := make([]Result, 8)
	deadline := time.Now().Add(10 * time.Second)
	for !r.conn.Broken() {
		if time.Now().After(deadline) {
			t.Fatalf("never fenced: %+v", r.srv.lease())
		}
		r.conn.Send(0, ids[:r.conn.Free()])
		n := r.conn.Poll(0, res)
		for _, x := range res[:n] {
			if x.Err == nil && x.Value > hi {
				t.Fatalf("value %d beyond the lease %d", x.Value, hi)
			}
		}
	}
	if st := r.srv.lease(); !st.Fenced || st.Fences != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := admit(r.srv, "x", r.conn.QPs()); !errors.Is(err, ErrFenced) {
		t.Fatalf("Admit while fenced = %v", err)
	}
	r.orc.mu.Lock()
	r.orc.refuse = false
	r.orc.mu.Unlock()
	for r.srv.lease().Fenced {
		if time.Now().After(deadline) {
			t.Fatal("fence never lifted")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStopNoLateAnswers(t *testing.T) {
	r := newRig(t, Config{}, "", "", 1, 4)
	r.run(t, 10)
	high, _ := r.srv.Stop()
	ids := make([]int, 4)
	r.conn.Send(0, ids)
	res := make([]Result, 8)
	deadline := time.Now().Add(10 * time.Second)
	for failed := 0; failed < 4; {
		if time.Now().After(deadline) {
			t.Fatal("requests after Stop neither failed nor answered")
		}
		n := r.conn.Poll(0, res)
		for _, x := range res[:n] {
			if x.Err == nil {
				t.Fatalf("answered %d after Stop (high %d)", x.Value, high)
			}
			failed++
		}
	}
	if _, err := admit(r.srv, "x", r.conn.QPs()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Admit after Stop = %v", err)
	}
}

// admit admits qps through the server's dataplane.Mode API and returns
// the grant as Conn takes it.
func admit(srv *Server, name string, qps []Endpoint) (Grant, error) {
	a := dataplane.Admission{Name: name}
	for _, q := range qps {
		a.QPs = append(a.QPs, dataplane.Endpoint(q))
	}
	dg, err := srv.Admit(context.Background(), a, dataplane.SessionRef{})
	if err != nil {
		return Grant{}, err
	}
	g := Grant{Session: dg.Session, Addr: dg.RemoteAddr[0], RKey: dg.RKey[0], Epoch: dg.Epoch, PSNs: dg.ConnPSNs}
	for _, e := range dg.ServerConnQPs {
		g.Server = append(g.Server, Endpoint(e))
	}
	return g, nil
}
