package client

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/rfp"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

type rfpRig struct {
	srv *rfp.Server
	orc *fakeOracle
	tr  *rfpTransport
	st  *stats
	t0  time.Time
	// grants are the grants of every admission, in order.
	grants []handshake.Grant
}

// newRFPRig starts an rfp server on one soft device and admits a
// transport to it from another.
func newRFPRig(t testing.TB, srvOpts, cliOpts string, qps, window, reads int) *rfpRig {
	t.Helper()
	r := &rfpRig{orc: &fakeOracle{BehindEvery: 7}, st: &stats{}, t0: time.Now()}
	var err error
	r.srv, err = rfp.New(rfp.Config{Config: wk.Config{Device: openSoft(t, srvOpts), Oracle: r.orc, Behind: errBehind, Workers: 2},
		MaxWindow: 32, MaxQPs: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	r.tr = r.admit(t, cliOpts, qps, window, reads)
	return r
}

// admit creates a transport on a device of its own and admits it.
func (r *rfpRig) admit(t testing.TB, cliOpts string, qps, window, reads int) *rfpTransport {
	t.Helper()
	dev := openSoft(t, cliOpts)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	tr, err := newRFP(pd, dev, r.st, qps, window, reads, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	g, err := r.srv.Admit(context.Background(), handshake.Admission{Name: "test", Window: window, QPs: tr.endpoints()}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	r.grants = append(r.grants, g)
	if err := tr.attach(g); err != nil {
		t.Fatal(err)
	}
	return tr
}

func (r *rfpRig) now() time.Duration { return time.Since(r.t0) }

func (r *rfpRig) run(t testing.TB, total int) []uint64 {
	t.Helper()
	vs := drive(t, r.tr, r.st, total, r.now)
	checkUnique(t, vs)
	return vs
}

// TestRFPServeClean: answers fetched by READ (and, when a worker is slow,
// by the fallback SEND) are unique and in real-time order.
func TestRFPServeClean(t *testing.T) {
	r := newRFPRig(t, "", "", 2, 8, 0)
	r.run(t, 3000)
	st := r.srv.Stats()
	t.Logf("client: %d READs, %d fallbacks, %d torn; server: served %d, drops %d, %v", r.tr.Reads, r.tr.Fallbacks, r.tr.Torn,
		st.Served, st.Drops, st.Counters)
	if r.tr.Reads < 3000 || st.Served < 3000 {
		t.Fatalf("%d READs, %d served", r.tr.Reads, st.Served)
	}
	if r.tr.reads != spec.RFPDefaultReads {
		t.Fatalf("R = %d, want the default %d", r.tr.reads, spec.RFPDefaultReads)
	}
	checkServiceTime(t, st)
}

// TestRFPFallback: with R=1 and a server slower than one READ, requests
// are answered by the server's SEND: the hybrid mechanism's server-reply
// mode.
func TestRFPFallback(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 4, 1)
	r.orc.Delay.Store(int64(300 * time.Microsecond))
	r.run(t, 300)
	st := r.srv.Stats()
	sends := counter(st, "reply_sends_total", "") + counter(st, "reply_resends_total", "")
	t.Logf("client: %d READs, %d fallbacks; server: %d fallback SENDs, served %d, %v", r.tr.Reads, r.tr.Fallbacks, sends, st.Served, st.Counters)
	if r.tr.Fallbacks == 0 || sends == 0 {
		t.Fatalf("no fallback: client %d, server %d", r.tr.Fallbacks, sends)
	}
}

// TestRFPServeFaults: under loss, duplication and reordering on both
// sides, no value is returned twice or out of order.
func TestRFPServeFaults(t *testing.T) {
	r := newRFPRig(t, "loss=0.05,dup=0.02,reorder=0.05,seed=1", "loss=0.05,dup=0.02,reorder=0.05,seed=2", 2, 8, 2)
	r.run(t, 1500)
	t.Logf("client: %d READs, %d fallbacks, %d torn, %d stale; server: %+v", r.tr.Reads, r.tr.Fallbacks, r.tr.Torn,
		r.st.stale.Load(), r.srv.Stats())
}

// TestRFPCancelNeverStale: callers give up on every request at once and
// the positions are reused while their READs are in flight, many times;
// then the last requests are let through. Each of their values is above
// every value the oracle had handed out before they were sent: no record
// (or SEND) of a cancelled seq is ever taken for them.
func TestRFPCancelNeverStale(t *testing.T) {
	r := newRFPRig(t, "loss=0.02,reorder=0.05,seed=3", "loss=0.02,reorder=0.05,seed=4", 2, 8, 2)
	capacity := r.tr.Free()
	ids := make([]int, capacity)
	for i := range ids {
		ids[i] = i
	}
	res := make([]result, 64)
	for round := range 200 {
		if n, err := r.tr.Send(r.now(), ids); n != capacity || err != nil {
			t.Fatalf("round %d: sent %d of %d: %v", round, n, capacity, err)
		}
		time.Sleep(time.Duration(round%5) * 50 * time.Microsecond)
		for _, x := range res[:r.tr.Poll(r.now(), res)] {
			r.tr.Cancel(x.ID) // answered before the caller gave up: nothing to cancel, an engine would take it
		}
		for _, id := range ids {
			r.tr.Cancel(id)
		}
	}
	floor := r.orc.Current()
	vs := r.run(t, 2000)
	for _, v := range vs {
		if v <= floor {
			t.Fatalf("value %#x not above %#x, the oracle's last value when the request was sent: a stale record", v, floor)
		}
	}
	t.Logf("client: %d READs, %d stale or torn answers dropped", r.tr.Reads, r.st.stale.Load())
}

// TestRFPNoAnswerAfterMaxResidence: a claim that succeeds only after
// spec.MaxResidence writes no record and sends nothing; the request is
// answered after the oracle recovers, under a fresh seq.
func TestRFPNoAnswerAfterMaxResidence(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 1, 0)
	r.orc.SetBehindEvery(0)
	r.orc.Delay.Store(int64(3 * spec.MaxResidence))
	if n, err := r.tr.Send(r.now(), []int{0}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	res := make([]result, 4)
	deadline := time.Now().Add(10 * time.Second)
	for counter(r.srv.Stats(), "drops_total", "late") == 0 {
		if n := r.tr.Poll(r.now(), res); n > 0 {
			t.Fatalf("answered %#x although the claim took %v", res[0].Value, 3*spec.MaxResidence)
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither answered nor dropped: %+v", r.srv.Stats())
		}
		if counter(r.srv.Stats(), "drops_total", "expired") > 0 {
			r.tr.Expire(r.now() + time.Hour) // too old when swept: rewrite it
		}
		time.Sleep(time.Millisecond)
	}
	r.orc.Delay.Store(0)
	for r.tr.Poll(r.now(), res) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the retransmission was never answered: %+v", r.srv.Stats())
		}
		r.tr.Expire(r.now() + time.Hour)
		time.Sleep(time.Millisecond)
	}
	if res[0].Err != nil || res[0].Value == 0 {
		t.Fatalf("%+v", res[0])
	}
}

// TestRFPIsolation: a session's QP cannot WRITE another session's request
// slots: the blocks live in the other session's protection domain, and
// the server's responder refuses the R_Key. The intruder's QP fails; the
// victim keeps being served.
func TestRFPIsolation(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 4, 0)
	intruder := r.admit(t, "", 1, 4, 0)
	victim := r.grants[0]
	r.run(t, 50)
	q := intruder.qps[0]
	spec.PutRFPSlot(intruder.slotMR.Bytes(), spec.RFPOpFetch, 1<<40)
	q.wrs[0] = verbs.SendWR{ID: rfpWRID(rfpKindWrite, 0, 0), Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline | verbs.Signaled,
		SG:         []verbs.SGE{{Addr: intruder.slotMR.Addr(), Length: spec.RFPSlotLen, LKey: intruder.slotMR.LKey()}},
		RemoteAddr: victim.RemoteAddr[0], RKey: victim.RKey[0]}
	if _, err := q.qp.PostSend(q.wrs[:1]); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 4)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := intruder.cq.Poll(wc)
		if n > 0 {
			if wc[0].Status != verbs.WCRemAccessErr {
				t.Fatalf("WRITE into another session's slot: %v, want a remote access error", wc[0].Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the forged WRITE never completed")
		}
		time.Sleep(100 * time.Microsecond)
	}
	r.run(t, 50)
	if st := q.qp.State(); st != verbs.StateErr || r.tr.Broken() {
		t.Fatalf("intruder's QP %v, victim broken %v", st, r.tr.Broken())
	}
}

// TestRFPStopFailsQPs: Stop moves the server's QPs to ERR; the client's
// requests then fail on the wire (the engine reconnects), never answered.
func TestRFPStopFailsQPs(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 4, 0)
	r.run(t, 20)
	if high, err := r.srv.Stop(); high != 0 || err != nil {
		t.Fatal(high, err)
	}
	if n, err := r.tr.Send(r.now(), []int{0, 1}); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	res := make([]result, 4)
	failed := 0
	deadline := time.Now().Add(10 * time.Second)
	for failed < 2 {
		for _, x := range res[:r.tr.Poll(r.now(), res)] {
			if x.Err == nil {
				t.Fatalf("answered %#x after Stop", x.Value)
			}
			failed++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 requests failed after Stop", failed)
		}
		time.Sleep(time.Millisecond)
	}
	if !r.tr.Broken() || r.tr.Free() != 0 {
		t.Fatalf("broken %v, free %d", r.tr.Broken(), r.tr.Free())
	}
}

// BenchmarkRFP measures one request's round trip (WRITE, READs, the
// worker's claim and record) with 16 in flight on one QP; allocs/op
// counts the client's and the in-process server's allocations.
func BenchmarkRFP(b *testing.B) {
	r := newRFPRig(b, "", "", 1, 16, 0)
	b.ReportAllocs()
	b.ResetTimer()
	drive(b, r.tr, r.st, b.N, r.now)
	b.StopTimer()
	b.ReportMetric(float64(r.tr.Reads)/float64(b.N), "reads/op")
	b.ReportMetric(float64(r.tr.Fallbacks)/float64(b.N), "fallbacks/op")
}
