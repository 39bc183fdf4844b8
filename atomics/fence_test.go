package atomics

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// peer is one client of the atomics mode at the verbs level: one RC QP
// it may post any atomic on, honest or not.
type peer struct {
	t   testing.TB
	qp  verbs.QP
	cq  verbs.CQ
	res verbs.MR
	be  bool
	g   handshake.Grant
	wcs [1]verbs.WC
}

// admitPeer admits a new client of srv from its own soft device, with
// the identities a (a.QPs is filled in here).
func admitPeer(t testing.TB, srv *Server, a handshake.Admission) (*peer, error) {
	t.Helper()
	dev := open(t, "")
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, be: dev.Attr().AtomicBigEndian}
	if p.cq, err = dev.CreateCQ(8); err != nil {
		t.Fatal(err)
	}
	if p.res, err = pd.RegMR(64, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if p.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.qp.Close(); p.res.Close(); p.cq.Close(); pd.Close() })
	a.QPs = []handshake.Endpoint{{Addr: p.qp.Address(), QPN: p.qp.QPN()}}
	if p.g, err = srv.Admit(context.Background(), a, handshake.SessionRef{}); err != nil {
		return nil, err
	}
	if err := verbs.Connect(p.qp, verbs.ConnectAttr{Remote: p.g.ServerConnQPs[0].Addr, RemoteQPN: p.g.ServerConnQPs[0].QPN,
		SQPSN: p.g.ConnPSNs[0], Timeout: 12, RetryCnt: 7}); err != nil { // ~120 ms: a loaded test host is no dead server
		t.Fatal(err)
	}
	return p, nil
}

// do runs one atomic on the server's counter and returns the value it
// fetched, or the completion's error.
func (p *peer) do(op verbs.Opcode, add, swap uint64) (uint64, error) {
	p.t.Helper()
	if err := p.post(op, add, swap); err != nil {
		return 0, err
	}
	return p.wait()
}

// post posts one atomic on the server's counter.
func (p *peer) post(op verbs.Opcode, add, swap uint64) error {
	wr := verbs.SendWR{ID: 1, Opcode: op, Flags: verbs.Signaled, SG: []verbs.SGE{{Addr: p.res.Addr(), Length: 8, LKey: p.res.LKey()}},
		RemoteAddr: p.g.RemoteAddr[0], RKey: p.g.RKey[0], CompareAdd: add, Swap: swap}
	_, err := p.qp.PostSend([]verbs.SendWR{wr})
	return err
}

// wait waits for the atomic posted last and returns the value it
// fetched, or the completion's error.
func (p *peer) wait() (uint64, error) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		n, err := p.cq.Poll(p.wcs[:])
		if err != nil {
			p.t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if err := p.cq.Wait(ctx); err != nil {
			p.t.Fatalf("no completion: %v", err)
		}
	}
	if err := p.wcs[0].Err(); err != nil {
		return 0, err
	}
	if p.be {
		return binary.BigEndian.Uint64(p.res.Bytes()), nil
	}
	return binary.LittleEndian.Uint64(p.res.Bytes()), nil
}

// take fetches n values the honest way.
func (p *peer) take(n int) []uint64 {
	p.t.Helper()
	vs := make([]uint64, 0, n)
	for range n {
		v, err := p.do(verbs.OpAtomicFetchAdd, spec.FetchAddDelta, 0)
		if err != nil {
			p.t.Fatalf("honest FETCH_AND_ADD after %d values: %v", len(vs), err)
		}
		vs = append(vs, v)
	}
	return vs
}

// hostile is an atomic an admitted client may post to move the shared
// counter: backward, or far ahead of what the lease made durable.
type hostile struct {
	name      string
	op        verbs.Opcode
	add, swap uint64 // a CAS compares with the counter's current value
}

var hostiles = []hostile{
	{"FetchAddRewind", verbs.OpAtomicFetchAdd, 1<<64 - 1000, 0},
	{"CompareSwap", verbs.OpAtomicCmpSwap, 0, 1},
	{"FetchAddLarge", verbs.OpAtomicFetchAdd, 1 << 30, 0},
	{"FetchAddTwo", verbs.OpAtomicFetchAdd, 2, 0},
}

// run posts h from p on srv's counter.
func (h hostile) run(p *peer, srv *Server) (uint64, error) {
	if h.op == verbs.OpAtomicCmpSwap {
		return p.do(h.op, srv.Next(), h.swap)
	}
	return p.do(h.op, h.add, 0)
}

// checkAbove fails t unless every value of later is above every value of
// earlier, and reports duplicates by name.
func checkAbove(t *testing.T, earlier, later []uint64, what string) {
	t.Helper()
	top := slices.Max(earlier)
	dup := 0
	for _, v := range later {
		if slices.Contains(earlier, v) {
			dup++
		}
	}
	if lo := slices.Min(later); lo <= top || dup > 0 {
		t.Errorf("%s: first value %d, lowest %d, highest served before %d; %d of %d values already handed out",
			what, later[0], lo, top, dup, len(later))
	}
}

// TestHostileAtomicsRefused (issue 26): an admitted client that posts an
// atomic other than the fetch-and-add of one (an add that wraps the
// counter back, a compare-and-swap, a large or any other add) gets an
// error and moves nothing; a client started after it gets values above
// every value served, none beyond the lease.
func TestHostileAtomicsRefused(t *testing.T) {
	for _, h := range hostiles {
		t.Run(h.name, func(t *testing.T) {
			srv, err := New(context.Background(), Config{Device: open(t, ""), Oracle: &fakeOracle{}, Epoch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			a, err := admitPeer(t, srv, handshake.Admission{Name: "A"})
			if err != nil {
				t.Fatal(err)
			}
			served := a.take(2000)
			m, err := admitPeer(t, srv, handshake.Admission{Name: "mallory"})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := h.run(m, srv); err == nil {
				served = append(served, v)
				t.Errorf("hostile %s completed (fetched %d); the counter is now at %d", h.name, v, srv.Next())
			}
			b, err := admitPeer(t, srv, handshake.Admission{Name: "B"})
			if err != nil {
				t.Fatal(err)
			}
			later := b.take(100)
			checkAbove(t, served, later, "B (started after mallory)")
			if hi := srv.Lease().LeaseHi; slices.Max(later) > hi {
				t.Errorf("B got %d, beyond the lease's end %d", slices.Max(later), hi)
			}
		})
	}
}

// openOracle opens a counter-format oracle on dir, closed when the test
// ends (Close is idempotent).
func openOracle(t *testing.T, dir string) *oracle.Oracle {
	t.Helper()
	o, err := oracle.Open(context.Background(), oracle.Config{Format: spec.FormatCounter, Dir: dir, Init: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// TestRestartServesNoValueTwice (issue 26): whatever an admitted client
// posts, every value served stays at or below the persisted mark, so a
// server restarted on the same data directory (after a crash: nothing
// floors the oracle) serves none of them again.
func TestRestartServesNoValueTwice(t *testing.T) {
	for _, h := range hostiles {
		t.Run(h.name, func(t *testing.T) {
			dir := t.TempDir()
			o := openOracle(t, dir)
			srv, err := New(context.Background(), Config{Device: open(t, ""), Oracle: o, Epoch: 1})
			if err != nil {
				t.Fatal(err)
			}
			a, err := admitPeer(t, srv, handshake.Admission{Name: "A"})
			if err != nil {
				t.Fatal(err)
			}
			served := a.take(2000)
			m, err := admitPeer(t, srv, handshake.Admission{Name: "mallory"})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := h.run(m, srv); err == nil {
				served = append(served, v)
				t.Errorf("hostile %s completed (fetched %d)", h.name, v)
			}
			b, err := admitPeer(t, srv, handshake.Admission{Name: "B"})
			if err != nil {
				t.Fatal(err)
			}
			served = append(served, b.take(100)...)
			if top, mark := slices.Max(served), o.Mark(); top > mark {
				t.Errorf("served up to %d, persisted mark %d", top, mark)
			}
			// A crash: the data path and the oracle go without a Stop,
			// so nothing floors the oracle above the counter.
			srv.Close()
			o.Close()
			o2 := openOracle(t, dir)
			srv2, err := New(context.Background(), Config{Device: open(t, ""), Oracle: o2, Epoch: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer srv2.Close()
			c, err := admitPeer(t, srv2, handshake.Admission{Name: "C"})
			if err != nil {
				t.Fatal(err)
			}
			checkAbove(t, served, c.take(100), fmt.Sprintf("after restart (mark was %d)", o.Mark()))
		})
	}
}

// waitFor polls cond every millisecond until it holds, failing t after
// ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMonitorFencesSlippedAdd (issue 26): when the counter word is found
// beyond the lease or below an earlier reading (an add the provider could
// not refuse, on a NIC), the monitor fences: every session's QPs go, and
// the counter resumes above every value the word reached and inside a
// new lease; Stop reports a high that covers them.
func TestMonitorFencesSlippedAdd(t *testing.T) {
	for _, c := range []struct {
		name string
		move func(next uint64) uint64
	}{
		{"Overrun", func(next uint64) uint64 { return next + 1<<30 }},
		{"Rewind", func(next uint64) uint64 { return next - 1000 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := openOracle(t, t.TempDir())
			srv, err := New(context.Background(), Config{Device: open(t, ""), Oracle: o, Epoch: 1, Interval: 200 * time.Microsecond})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			a, err := admitPeer(t, srv, handshake.Admission{Name: "A"})
			if err != nil {
				t.Fatal(err)
			}
			served := a.take(2000)
			next := srv.Next()
			// What a NIC would do for an add it cannot refuse; the
			// CPU writes the word only in this test.
			moved := c.move(next)
			atomic.StoreUint64(srv.word, srv.order(moved))
			served = append(served, max(next, moved)-1) // the highest a client could have fetched
			waitFor(t, "fenced", func() bool { return srv.Lease().Fences > 0 })
			if _, err := a.do(verbs.OpAtomicFetchAdd, 1, 0); err == nil {
				t.Errorf("A's session survived the fence")
			}
			waitFor(t, "admitting again", func() bool { return !srv.Lease().Fenced })
			b, err := admitPeer(t, srv, handshake.Admission{Name: "B"})
			if err != nil {
				t.Fatal(err)
			}
			later := b.take(100)
			checkAbove(t, served, later, "B (started after the fence)")
			if hi := srv.Lease().LeaseHi; slices.Max(later) > hi {
				t.Errorf("B got %d, beyond the lease's end %d", slices.Max(later), hi)
			}
			if top, mark := slices.Max(later), o.Mark(); top > mark {
				t.Errorf("B got %d, above the persisted mark %d", top, mark)
			}
			if high, _ := srv.Stop(); high < slices.Max(served) {
				t.Errorf("Stop's high %d is below %d, a value the word reached", high, slices.Max(served))
			}
		})
	}
}

// TestNoValueBeyondLease (issue 26): where the provider enforces the
// policy, no value beyond the lease is handed out even if the monitor
// never runs (no rate assumption): the fetch-and-add that would return
// the lease's end + 1 is held until the lease is renewed, and then runs.
func TestNoValueBeyondLease(t *testing.T) {
	dev := open(t, "")
	srv, err := New(context.Background(), Config{Device: dev, Oracle: &fakeOracle{}, Epoch: 1, Block: 64, FenceMargin: 16, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a, err := admitPeer(t, srv, handshake.Admission{Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	hi := srv.Lease().LeaseHi
	if vs := a.take(64); slices.Max(vs) != hi {
		t.Fatalf("64 values of a 64-value lease end at %d, the lease at %d", slices.Max(vs), hi)
	}
	if err := a.post(verbs.OpAtomicFetchAdd, spec.FetchAddDelta, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "held or answered", func() bool { return counter(dev, verbs.CounterRCNaks) > 0 || srv.Next() > hi+1 })
	if next := srv.Next(); next != hi+1 {
		v, err := a.wait()
		t.Fatalf("the fetch-and-add beyond the lease's end %d returned %d (%v); the counter is at %d", hi, v, err, next)
	}
	srv.setLease(hi + 64) // what the monitor does when it renews
	if v, err := a.wait(); err != nil || v != hi+1 {
		t.Fatalf("after the renewal the held fetch-and-add returned %d (%v), want %d", v, err, hi+1)
	}
}

// counter reads a device counter (0 when it has none).
func counter(dev verbs.Device, name string) uint64 {
	var v uint64
	if c, ok := dev.(verbs.Counters); ok {
		c.VisitCounters(func(n string, x uint64) {
			if n == name {
				v = x
			}
		})
	}
	return v
}
