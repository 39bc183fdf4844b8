package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/atomics"
)

type atomicsRig struct {
	srv  *atomics.Server
	conn *atomicsConn
	st   *stats
	orc  *fakeOracle
}

func newAtomicsRig(t testing.TB, cfg atomics.Config, srvOpts, cliOpts string, qps, window int) *atomicsRig {
	t.Helper()
	r := &atomicsRig{orc: &fakeOracle{}, st: &stats{}}
	cfg.Device, cfg.Oracle = openSoft(t, srvOpts), r.orc
	var err error
	if r.srv, err = atomics.New(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	dev := openSoft(t, cliOpts)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if r.conn, err = newAtomics(pd, dev, r.st, qps, window); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close(); pd.Close() })
	g, err := r.srv.Admit(context.Background(), handshake.Admission{Name: "test", QPs: r.conn.endpoints()}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.conn.attach(g); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *atomicsRig) run(t testing.TB, total int) []uint64 {
	t.Helper()
	return drive(t, r.conn, r.st, total, func() time.Duration { return 0 })
}

func TestAtomicsFetchAddClean(t *testing.T) {
	r := newAtomicsRig(t, atomics.Config{}, "", "", 2, 8)
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

func TestAtomicsFetchAddFaults(t *testing.T) {
	opts := "loss=0.05,dup=0.05,reorder=0.05,seed=5"
	r := newAtomicsRig(t, atomics.Config{}, opts, opts, 2, 8)
	vs := r.run(t, 1000)
	checkUnique(t, vs)
	// Exactly once: with no gaps from failed QPs, the counter moved by
	// exactly the number of values taken.
	if got := r.srv.Next() - 1<<40; got != 1000 {
		t.Fatalf("counter advanced by %d for 1000 requests (an atomic ran twice?)", got)
	}
}

// TestAtomicsCancelKeepsSlot: a cancelled atomic keeps its slot until it
// completes, and its value is not handed to the request that reuses the
// ID.
func TestAtomicsCancelKeepsSlot(t *testing.T) {
	r := newAtomicsRig(t, atomics.Config{}, "", "", 1, 2)
	if n, err := r.conn.Send(0, []int{0, 1}); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	r.conn.Cancel(0)
	if f := r.conn.Free(); f != 0 {
		t.Fatalf("Free = %d after cancelling an atomic in flight, want 0 (its slot is busy)", f)
	}
	res := make([]result, 4)
	deadline := time.Now().Add(10 * time.Second)
	var got []result
	for r.conn.Outstanding() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("atomics never completed")
		}
		n := r.conn.Poll(0, res)
		got = append(got, res[:n]...)
	}
	if len(got) != 1 || got[0].ID != 1 || got[0].Err != nil {
		t.Fatalf("results %+v, want only request 1's", got)
	}
	// ID 0 is the engine's again.
	checkUnique(t, r.run(t, 10))
}

// TestAtomicsLeaseRenewsAndFences: the monitor renews the lease ahead of
// the counter; when renewals fail and the counter nears the lease's end,
// the QPs are fenced and no value beyond the lease is handed out.
func TestAtomicsLeaseRenewsAndFences(t *testing.T) {
	r := newAtomicsRig(t, atomics.Config{Block: 64, FenceMargin: 16, Interval: 200 * time.Microsecond}, "", "", 1, 4)
	vs := r.run(t, 300)
	checkUnique(t, vs)
	if st := r.srv.Lease(); st.Renewals == 0 {
		t.Fatalf("no renewal after %d values with 64-value leases: %+v", len(vs), st)
	}
	r.orc.SetRefuse(true)
	hi := r.srv.Lease().LeaseHi
	ids := []int{0, 1, 2, 3}
	res := make([]result, 8)
	deadline := time.Now().Add(10 * time.Second)
	for !r.conn.Broken() {
		if time.Now().After(deadline) {
			t.Fatalf("never fenced: %+v", r.srv.Lease())
		}
		r.conn.Send(0, ids[:r.conn.Free()])
		n := r.conn.Poll(0, res)
		for _, x := range res[:n] {
			if x.Err == nil && x.Value > hi {
				t.Fatalf("value %d beyond the lease %d", x.Value, hi)
			}
		}
	}
	if st := r.srv.Lease(); !st.Fenced || st.Fences != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := r.srv.Admit(context.Background(), handshake.Admission{Name: "x", QPs: r.conn.endpoints()}, handshake.SessionRef{}); !errors.Is(err, atomics.ErrFenced) {
		t.Fatalf("Admit while fenced = %v", err)
	}
	r.orc.SetRefuse(false)
	for r.srv.Lease().Fenced {
		if time.Now().After(deadline) {
			t.Fatal("fence never lifted")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAtomicsStopNoLateAnswers(t *testing.T) {
	r := newAtomicsRig(t, atomics.Config{}, "", "", 1, 4)
	r.run(t, 10)
	high, _ := r.srv.Stop()
	r.conn.Send(0, []int{0, 1, 2, 3})
	res := make([]result, 8)
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
	if _, err := r.srv.Admit(context.Background(), handshake.Admission{Name: "x", QPs: r.conn.endpoints()}, handshake.SessionRef{}); !errors.Is(err, atomics.ErrClosed) {
		t.Fatalf("Admit after Stop = %v", err)
	}
}
