package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/fasst"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

var errFaSSTBehind = errors.New("behind")

// fasstOracle counts up from 1<<40 and refuses every behindEvery-th
// claim (persistence lagging).
type fasstOracle struct {
	mu          sync.Mutex
	next        uint64
	calls       int
	behindEvery int
}

func (o *fasstOracle) Claim(n int) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.behindEvery > 0 && o.calls%o.behindEvery == 0 {
		return 0, errFaSSTBehind
	}
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func (o *fasstOracle) Current() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return max(o.next, 1) - 1
}

func openSoft(t testing.TB, opts string) verbs.Device {
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

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// admitVia is a transportEnv.connect that admits the request at m
// directly, translating the adminpb fields by hand (what package modes
// does on the server).
func admitVia(m dataplane.Mode) func(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	ep := func(e dataplane.Endpoint) *adminpb.Endpoint {
		a, _ := e.Addr.MarshalBinary()
		return &adminpb.Endpoint{Address: a, Qpn: uint32(e.QPN)}
	}
	return func(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
		a := dataplane.Admission{Name: req.GetClientName(), Window: int(req.GetWindow())}
		for _, e := range req.GetQps() {
			var addr verbs.Address
			if err := addr.UnmarshalBinary(e.GetAddress()); err != nil {
				return nil, err
			}
			a.QPs = append(a.QPs, dataplane.Endpoint{Addr: addr, QPN: verbs.QPN(e.GetQpn())})
		}
		g, err := m.Admit(ctx, a, dataplane.SessionRef{})
		if err != nil {
			return nil, err
		}
		resp := &adminpb.ConnectResponse{SessionId: g.Session, Epoch: g.Epoch, Window: uint32(g.Window), Qkey: g.QKey,
			AnswerQkey: g.AnswerQKey, Assignment: g.Assignment, High: g.High, Mode: spec.ModeFaSST,
			ProtocolVersion: spec.ProtocolVersion}
		for _, e := range g.ServerQPs {
			resp.ServerQps = append(resp.ServerQps, ep(e))
		}
		for _, e := range g.AnswerQPs {
			resp.AnswerQps = append(resp.AnswerQps, ep(e))
		}
		return resp, nil
	}
}

type fasstRig struct {
	srv *fasst.Server
	tr  *fasstTransport
	st  *stats
	t0  time.Time
}

func newFaSSTRig(t testing.TB, srvOpts, cliOpts string, qps, window int) *fasstRig {
	t.Helper()
	srv, err := fasst.New(dataplane.Config{Device: openSoft(t, srvOpts), Oracle: &fasstOracle{behindEvery: 7},
		Behind: errFaSSTBehind, Workers: 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	dev := openSoft(t, cliOpts)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	r := &fasstRig{srv: srv, st: &stats{}, t0: time.Now()}
	env := &transportEnv{dev: dev, pd: pd, qps: qps, window: window, retransmit: 5 * time.Millisecond, st: r.st,
		connect: admitVia(srv)}
	tr, err := dialFaSST(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	r.tr = tr.(*fasstTransport)
	t.Cleanup(func() { r.tr.Close(); pd.Close() })
	return r
}

func (r *fasstRig) now() time.Duration { return time.Since(r.t0) }

// run issues total calls, sending in bursts of up to burst free IDs per
// Send, and returns the values in completion order. Each value must be
// above every value returned before its call was sent (real-time order)
// and unique.
func (r *fasstRig) run(t testing.TB, total, burst int) []uint64 {
	t.Helper()
	capacity := len(r.tr.where)
	var free []int
	for id := capacity - 1; id >= 0; id-- {
		free = append(free, id)
	}
	res := make([]result, 64)
	floor := make([]uint64, capacity)
	var out []uint64
	var maxRet uint64
	seen := map[uint64]bool{}
	sent := 0
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d answered before the deadline (server %+v)", len(out), total, r.srv.Stats())
		}
		now := r.now()
		if want := min(r.tr.Free(), total-sent, burst, len(free)); want > 0 {
			ids := free[len(free)-want:]
			n, err := r.tr.Send(now, ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[:n] {
				floor[id] = maxRet
			}
			// Send takes a prefix: those taken leave the free list.
			free = append(free[:len(free)-want], ids[n:]...)
			sent += n
		}
		n := r.tr.Poll(now, res)
		for _, x := range res[:n] {
			if x.Err != nil {
				t.Fatalf("request %d failed: %v", x.ID, x.Err)
			}
			if x.Value <= floor[x.ID] {
				t.Fatalf("request %d got %d, not above %d returned before it was sent", x.ID, x.Value, floor[x.ID])
			}
			if seen[x.Value] {
				t.Fatalf("value %d handed out twice", x.Value)
			}
			seen[x.Value] = true
			maxRet = max(maxRet, x.Value)
			out = append(out, x.Value)
			free = append(free, x.ID)
		}
		r.tr.Expire(now)
	}
	if o := r.tr.Outstanding(); o != 0 {
		t.Errorf("%d outstanding after every call was answered", o)
	}
	return out
}

func counter(st dataplane.Stats, name, reason string) uint64 {
	for _, c := range st.Counters {
		if c.Name == name && c.Reason == reason {
			return c.Value
		}
	}
	return 0
}

func TestFaSSTServe(t *testing.T) {
	r := newFaSSTRig(t, "", "", 2, 8)
	r.run(t, 4000, 12)
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
	r.run(t, 3000, 8)
	st := r.srv.Stats()
	t.Logf("server served=%d batches=%d dup_ids=%d; client stale=%d malformed=%d forged=%d",
		st.Served, st.Batches, counter(st, "duplicate_ids_total", ""), r.st.stale.Load(), r.st.malformed.Load(), r.st.forged.Load())
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
	a, _ := f.end.QP.Address().MarshalBinary()
	self := &adminpb.Endpoint{Address: a, Qpn: uint32(f.end.QP.QPN())}
	env := &transportEnv{dev: cdev, pd: pd, qps: 1, window: window, retransmit: time.Hour, st: st,
		connect: func(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
			return &adminpb.ConnectResponse{Window: uint32(window), Qkey: f.qkey, AnswerQkey: f.aqkey,
				ServerQps: []*adminpb.Endpoint{self}, Assignment: []uint32{0}, AnswerQps: []*adminpb.Endpoint{self}}, nil
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
