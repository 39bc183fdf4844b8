package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/fasst"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

type fasstRig struct {
	srv *fasst.Server
	tr  *fasstTransport
	st  *stats
	t0  time.Time
}

// newFaSSTRig starts a fasst server and admits a transport of qps QPs
// to it directly (the dialer's Connect is tested with a scripted server
// below).
func newFaSSTRig(t testing.TB, srvOpts, cliOpts string, qps, window int) *fasstRig {
	t.Helper()
	srv, err := fasst.New(fasst.Config{Config: wk.Config{Device: openSoft(t, srvOpts), Oracle: &fakeOracle{BehindEvery: 7},
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
	r := &fasstRig{srv: srv, st: &stats{}, t0: time.Now()}
	if r.tr, err = newFaSST(pd, dev, qps, window, 5*time.Millisecond, r.st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.tr.Close() })
	a := handshake.Admission{Name: "test", Window: window}
	for _, q := range r.tr.qps {
		a.QPs = append(a.QPs, handshake.Endpoint{Addr: q.qp.Address(), QPN: q.qp.QPN()})
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

func (r *fasstRig) now() time.Duration { return time.Since(r.t0) }

func TestFaSSTServe(t *testing.T) {
	r := newFaSSTRig(t, "", "", 2, 8)
	checkUnique(t, drive(t, r.tr, r.st, 4000, r.now))
	if o := r.tr.Outstanding(); o != 0 {
		t.Errorf("%d outstanding after every call was answered", o)
	}
	st := r.srv.Stats()
	reqs := counter(st, "requests_total", "")
	t.Logf("server: %d values in %d requests, %d batches; client stale=%d", st.Served, reqs, st.Batches, r.st.stale.Load())
	if st.Served < 4000 || reqs == 0 {
		t.Fatalf("server stats %+v", st)
	}
	if reqs >= st.Served {
		t.Errorf("no coalescing: %d requests for %d values", reqs, st.Served)
	}
	if st.Drops != 0 {
		// Requests that waited past spec.MaxResidence on a loaded
		// machine are dropped, never answered late: not an error.
		t.Logf("drops without faults: expired=%d late=%d of %d", counter(st, "drops_total", "expired"), counter(st, "drops_total", "late"), st.Drops)
	}
}

func TestFaSSTFaults(t *testing.T) {
	opts := "loss=0.05,dup=0.05,reorder=0.05,seed=3"
	r := newFaSSTRig(t, opts, opts, 2, 8)
	checkUnique(t, drive(t, r.tr, r.st, 3000, r.now))
	st := r.srv.Stats()
	t.Logf("server served=%d batches=%d dup_ids=%d; client retransmits=%d stale=%d malformed=%d forged=%d",
		st.Served, st.Batches, counter(st, "duplicate_ids_total", ""), r.st.retransmits.Load(), r.st.stale.Load(), r.st.malformed.Load(), r.st.forged.Load())
	if r.st.retransmits.Load() == 0 {
		t.Errorf("5%% loss but no retransmission")
	}
	if r.st.stale.Load() == 0 {
		t.Errorf("5%% duplication and loss but no stale answer was dropped")
	}
}

// fakeServer is the test standing in for a FaSST server: one UD QP that
// takes the transport's requests and sends whatever answers the test
// builds, from a QP the grant names as an answer QP.
type fakeServer struct {
	end   *verbstest.End
	ah    verbs.AH
	qkey  uint32
	aqkey uint32
}

func newFaSSTFake(t *testing.T, window int) (*fakeServer, *fasstTransport, *stats) {
	dev := openSoft(t, "")
	f := &fakeServer{end: verbstest.NewEnd(t, dev, verbs.UD), qkey: 0x1234, aqkey: 0x5678}
	if err := verbs.BringUpUD(f.end.QP, f.qkey, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		verbstest.PostRecv(t, f.end.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(f.end.MR, i*64, 64)})
	}
	cdev := openSoft(t, "")
	pd, err := cdev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	st := &stats{}
	self := endpointOf(f.end.QP)
	env := &transportEnv{dev: cdev, pd: pd, qps: 1, window: window, retransmit: time.Hour, st: st,
		connect: func(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
			return handshake.EncodeGrant(handshake.Grant{Mode: spec.ModeFaSST, Window: window, QKey: f.qkey, AnswerQKey: f.aqkey,
				ServerQPs: []handshake.Endpoint{self}, Assignment: []uint32{0}, AnswerQPs: []handshake.Endpoint{self}}), nil
		}}
	tr, err := dialFaSST(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(); pd.Close() })
	c := tr.(*fasstTransport)
	f.ah = verbstest.AH(t, f.end, c.qps[0].qp.Address())
	return f, c, st
}

// request receives one request and returns its header.
func (f *fakeServer) request(t *testing.T) spec.FaSSTHeader {
	t.Helper()
	wc := verbstest.PollOne(t, f.end.RecvCQ, 5*time.Second)
	off := int(wc.ID) * 64
	h, err := spec.DecodeFaSSTRequest(f.end.MR.Bytes()[off+verbs.GRHLen : off+int(wc.ByteLen)])
	if err != nil {
		t.Fatal(err)
	}
	verbstest.PostRecv(t, f.end.QP, verbs.RecvWR{ID: wc.ID, SG: verbstest.SG(f.end.MR, off, 64)})
	return h
}

// answer sends an answer from qp (the fake's own, or a forger's).
func (f *fakeServer) answer(t *testing.T, from *verbstest.End, ah verbs.AH, dst verbs.QPN, k int, id spec.FaSSTID, first uint64) {
	t.Helper()
	off := 4096
	if err := spec.PutFaSSTAnswer(from.MR.Bytes()[off:], k, id, first); err != nil {
		t.Fatal(err)
	}
	verbstest.PostSend(t, from.QP, verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SG: verbstest.SG(from.MR, off, spec.FaSSTAnswerLen), AH: ah, RemoteQPN: dst, RemoteQKey: f.aqkey})
	verbstest.PollOne(t, from.SendCQ, 5*time.Second)
}

// pollFor polls until want results came, or fails; then checks that no
// more come for a while.
func pollFor(t *testing.T, tr *fasstTransport, res []result, want int) []result {
	t.Helper()
	var out []result
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d results of %d", len(out), want)
		}
		n := tr.Poll(0, res)
		out = append(out, res[:n]...)
	}
	return out
}

// TestFaSSTMatching drives the transport against a scripted server:
// coalescing, a retransmission under a fresh ID, stale, duplicate,
// miscounted and forged answers, a cancelled caller and results that do
// not fit in one Poll.
func TestFaSSTMatching(t *testing.T) {
	f, tr, st := newFaSSTFake(t, 8)
	dst := tr.qps[0].qp.QPN()
	// Four callers, one Send: one request for 4 values.
	if n, err := tr.Send(0, []int{3, 1, 4, 0}); n != 4 || err != nil {
		t.Fatal(n, err)
	}
	h1 := f.request(t)
	if h1.Count != 4 {
		t.Fatalf("request for %d values, want 4 (coalesced)", h1.Count)
	}
	if tr.Free() != 4 || tr.Outstanding() != 4 {
		t.Fatalf("free %d outstanding %d", tr.Free(), tr.Outstanding())
	}
	// The caller with ID 1 gives up; the timeout passes: the request goes
	// again for the 3 left, under a fresh ID.
	tr.Cancel(1)
	if n := tr.Expire(time.Hour); n != 1 {
		t.Fatalf("expire resent %d", n)
	}
	h2 := f.request(t)
	if h2.ID == h1.ID || h2.Count != 3 {
		t.Fatalf("retransmission %+v after %+v: want a fresh ID and 3 values", h2, h1)
	}
	res := make([]result, 2)
	// The late answer to the first ID is stale; a miscounted answer to the
	// current one too; a forged one (right Q_Key, another QP) is dropped.
	f.answer(t, f.end, f.ah, dst, 4, h1.ID, 100)
	f.answer(t, f.end, f.ah, dst, 2, h2.ID, 200)
	forger := verbstest.NewEnd(t, f.end.Dev, verbs.UD)
	if err := verbs.BringUpUD(forger.QP, 0x9999, 0); err != nil {
		t.Fatal(err)
	}
	f.answer(t, forger, verbstest.AH(t, forger, tr.qps[0].qp.Address()), dst, 3, h2.ID, 300)
	// The real answer: three values, 1000..1002, for IDs 3, 4, 0 in the
	// order they were sent; they come two per Poll (res holds 2).
	f.answer(t, f.end, f.ah, dst, 3, h2.ID, 1000)
	// A duplicate of it is stale.
	f.answer(t, f.end, f.ah, dst, 3, h2.ID, 1000)
	got := pollFor(t, tr, res, 3)
	want := []result{{ID: 3, Value: 1000}, {ID: 4, Value: 1001}, {ID: 0, Value: 1002}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("results %+v, want %+v", got, want)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.stale.Load() < 3 || st.forged.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stale %d (want 3), forged %d (want 1)", st.stale.Load(), st.forged.Load())
		}
		if n := tr.Poll(0, res); n != 0 {
			t.Fatalf("extra results %+v", res[:n])
		}
	}
	if tr.Outstanding() != 0 || tr.Free() != 8 {
		t.Fatalf("after: outstanding %d free %d", tr.Outstanding(), tr.Free())
	}
	if _, ok := tr.NextDeadline(); ok {
		t.Error("a deadline with nothing in flight")
	}
	// A caller that gives up after its answer was accepted but before it
	// was reported is never reported.
	if n, _ := tr.Send(0, []int{5, 6, 7}); n != 3 {
		t.Fatal(n)
	}
	h3 := f.request(t)
	f.answer(t, f.end, f.ah, dst, 3, h3.ID, 2000)
	one := make([]result, 1)
	got = pollFor(t, tr, one, 1)
	tr.Cancel(6)
	got = append(got, pollFor(t, tr, one, 1)...)
	if got[0] != (result{ID: 5, Value: 2000}) || got[1] != (result{ID: 7, Value: 2002}) {
		t.Fatalf("after cancelling a carried caller: %+v", got)
	}
	if tr.Outstanding() != 0 {
		t.Fatalf("outstanding %d", tr.Outstanding())
	}
}

// TestFaSSTSendRefusesBusyID: Send takes only the prefix of IDs not in
// flight.
func TestFaSSTSendRefusesBusyID(t *testing.T) {
	_, tr, _ := newFaSSTFake(t, 4)
	if n, _ := tr.Send(0, []int{0}); n != 1 {
		t.Fatal(n)
	}
	if n, _ := tr.Send(0, []int{1, 0, 2}); n != 1 {
		t.Fatalf("took %d, want the prefix before the busy ID", n)
	}
	if n, _ := tr.Send(0, []int{9}); n != 0 {
		t.Fatalf("took ID 9 of capacity 4")
	}
}

// BenchmarkFaSSTCalls measures the transport's path (Send, Poll,
// Expire) against a real server on the userspace provider, burst
// callers per Send; -benchmem shows its allocations.
func BenchmarkFaSSTCalls(b *testing.B) {
	for _, burst := range []int{1, 8} {
		b.Run(fmt.Sprintf("burst=%d", burst), func(b *testing.B) {
			r := newFaSSTRig(b, "", "", 1, 8)
			ids := make([]int, burst)
			for i := range ids {
				ids[i] = i
			}
			res := make([]result, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				now := r.now()
				n, err := r.tr.Send(now, ids)
				if err != nil || n != burst {
					b.Fatal(n, err)
				}
				for got := 0; got < burst; {
					got += r.tr.Poll(r.now(), res)
					r.tr.Expire(r.now())
				}
				done += burst
			}
		})
	}
}
