package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/rfp"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var errRFPBehind = errors.New("behind")

// rfpOracle counts up from 1<<40, refuses every behindEvery-th claim and
// takes delay per claim.
type rfpOracle struct {
	mu          sync.Mutex
	next        uint64
	calls       int
	behindEvery int
	delay       atomic.Int64
}

func (o *rfpOracle) Claim(n int) (uint64, error) {
	if d := time.Duration(o.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.behindEvery > 0 && o.calls%o.behindEvery == 0 {
		return 0, errRFPBehind
	}
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func (o *rfpOracle) Current() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next - 1
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

// rfpGrantResponse translates a grant as package modes does.
func rfpGrantResponse(g dataplane.Grant) *adminpb.ConnectResponse {
	resp := &adminpb.ConnectResponse{SessionId: g.Session, Mode: spec.ModeRFP, Window: uint32(g.Window), Epoch: g.Epoch,
		AnswerQkey: g.AnswerQKey, RemoteAddr: g.RemoteAddr, Rkey: g.RKey, ProtocolVersion: spec.ProtocolVersion}
	for _, e := range g.ServerConnQPs {
		b, _ := e.Addr.MarshalBinary()
		resp.ServerConnQps = append(resp.ServerConnQps, &adminpb.Endpoint{Address: b, Qpn: uint32(e.QPN)})
	}
	for _, p := range g.ConnPSNs {
		resp.ConnPsns = append(resp.ConnPsns, uint32(p))
	}
	return resp
}

type rfpRig struct {
	srv *rfp.Server
	orc *rfpOracle
	tr  *rfpTransport
	st  *stats
	t0  time.Time
	// grants are the grants of every dial, in order.
	grants []dataplane.Grant
}

// newRFPRig starts an rfp server on one soft device and dials a
// transport to it from another, admitting it through Mode.Admit as the
// admin plane would.
func newRFPRig(t testing.TB, srvOpts, cliOpts string, qps, window, reads int) *rfpRig {
	t.Helper()
	r := &rfpRig{orc: &rfpOracle{behindEvery: 7}, st: &stats{}, t0: time.Now()}
	var err error
	r.srv, err = rfp.New(rfp.Config{Config: dataplane.Config{Device: openSoft(t, srvOpts), Oracle: r.orc, Behind: errRFPBehind,
		Workers: 2, MaxWindow: 32, MaxClients: 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	r.tr = r.dial(t, cliOpts, qps, window, reads)
	return r
}

// dial admits a transport from a device of its own.
func (r *rfpRig) dial(t testing.TB, cliOpts string, qps, window, reads int) *rfpTransport {
	t.Helper()
	dev := openSoft(t, cliOpts)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	env := &transportEnv{dev: dev, pd: pd, qps: qps, window: window, retransmit: 20 * time.Millisecond, rfpReads: reads, st: r.st,
		connect: func(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
			a := dataplane.Admission{Name: "test", Window: int(req.GetWindow())}
			for _, e := range req.GetQps() {
				var addr verbs.Address
				if err := addr.UnmarshalBinary(e.GetAddress()); err != nil {
					return nil, err
				}
				a.QPs = append(a.QPs, dataplane.Endpoint{Addr: addr, QPN: verbs.QPN(e.GetQpn())})
			}
			g, err := r.srv.Admit(ctx, a, dataplane.SessionRef{})
			if err != nil {
				return nil, err
			}
			r.grants = append(r.grants, g)
			return rfpGrantResponse(g), nil
		}}
	tr, err := dialRFP(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr.(*rfpTransport)
}

func (r *rfpRig) now() time.Duration { return time.Since(r.t0) }

// run drives the transport as the engine does (IDs its own, answers
// checked against what was returned before each request was sent) until
// total answers came; every cancelEvery-th request sent is cancelled at
// once (0: none). It returns the values in the order returned.
func (r *rfpRig) run(t testing.TB, total, cancelEvery int) []uint64 {
	t.Helper()
	capacity := r.tr.Free()
	free := make([]int, 0, capacity)
	for id := capacity - 1; id >= 0; id-- {
		free = append(free, id)
	}
	floor := make([]uint64, capacity) // per ID: the largest value returned before it was sent
	res := make([]result, 64)
	var out []uint64
	var maxRet uint64
	sent := 0
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d answered before the deadline (server %+v)", len(out), total, r.srv.Stats())
		}
		now := r.now()
		if want := min(r.tr.Free(), len(free)); want > 0 {
			ids := free[len(free)-want:]
			n, err := r.tr.Send(now, ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[:n] {
				floor[id] = maxRet
			}
			free = free[:len(free)-n]
			for _, id := range ids[:n] {
				if sent++; cancelEvery > 0 && sent%cancelEvery == 0 {
					r.tr.Cancel(id)
					free = append(free, id)
				}
			}
		}
		n := r.tr.Poll(now, res)
		for _, x := range res[:n] {
			if x.Err != nil {
				t.Fatalf("request %d failed: %v", x.ID, x.Err)
			}
			if x.Value <= floor[x.ID] {
				t.Fatalf("request %d got %#x, not above %#x returned before it was sent", x.ID, x.Value, floor[x.ID])
			}
			maxRet = max(maxRet, x.Value)
			out = append(out, x.Value)
			free = append(free, x.ID)
		}
		r.tr.Expire(now)
	}
	// The caller gives up on what is still in flight.
	inFree := make([]bool, capacity)
	for _, id := range free {
		inFree[id] = true
	}
	for id, f := range inFree {
		if !f {
			r.tr.Cancel(id)
		}
	}
	seen := make(map[uint64]bool, len(out))
	for _, v := range out {
		if seen[v] {
			t.Fatalf("value %#x returned twice", v)
		}
		seen[v] = true
	}
	return out
}

func rfpCounter(st dataplane.Stats, name, reason string) uint64 {
	for _, c := range st.Counters {
		if c.Name == name && c.Reason == reason {
			return c.Value
		}
	}
	return 0
}

// TestRFPTransport: answers fetched by READ (and, when a worker is slow,
// by the fallback SEND) are unique and in real-time order.
func TestRFPTransport(t *testing.T) {
	r := newRFPRig(t, "", "", 2, 8, 0)
	r.run(t, 3000, 0)
	st := r.srv.Stats()
	t.Logf("client: %d READs, %d fallbacks, %d torn; server: %+v", r.tr.Reads, r.tr.Fallbacks, r.tr.Torn, st)
	if r.tr.Reads == 0 || st.Served < 3000 {
		t.Fatalf("%d READs, %d served", r.tr.Reads, st.Served)
	}
	if r.tr.reads != spec.RFPDefaultReads {
		t.Fatalf("R = %d, want the default %d", r.tr.reads, spec.RFPDefaultReads)
	}
}

// TestRFPFallback: with R=1 and a server slower than one READ, requests
// are answered by the server's SEND: the hybrid mechanism's server-reply
// mode.
func TestRFPFallback(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 4, 1)
	r.orc.delay.Store(int64(300 * time.Microsecond))
	r.run(t, 300, 0)
	st := r.srv.Stats()
	sends := rfpCounter(st, "reply_sends_total", "") + rfpCounter(st, "reply_resends_total", "")
	t.Logf("client: %d READs, %d fallbacks; server: %d fallback SENDs, %+v", r.tr.Reads, r.tr.Fallbacks, sends, st)
	if r.tr.Fallbacks == 0 || sends == 0 {
		t.Fatalf("no fallback: client %d, server %d", r.tr.Fallbacks, sends)
	}
}

// TestRFPFaults: under loss, duplication and reordering on both sides,
// and callers that give up (Cancel), no value is returned twice or out of
// order.
func TestRFPFaults(t *testing.T) {
	r := newRFPRig(t, "loss=0.05,dup=0.02,reorder=0.05,seed=1", "loss=0.05,dup=0.02,reorder=0.05,seed=2", 2, 8, 2)
	r.run(t, 1500, 13)
	t.Logf("client: %d READs, %d fallbacks, %d torn, %d stale; server: %+v", r.tr.Reads, r.tr.Fallbacks, r.tr.Torn,
		r.st.stale.Load(), r.srv.Stats())
}

// TestRFPResidence: a claim that succeeds only after spec.MaxResidence
// writes no record and sends nothing; the request is answered after the
// oracle recovers, under a fresh seq.
func TestRFPResidence(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 1, 0)
	r.orc.mu.Lock()
	r.orc.behindEvery = 0
	r.orc.mu.Unlock()
	r.orc.delay.Store(int64(3 * spec.MaxResidence))
	if n, err := r.tr.Send(r.now(), []int{0}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	res := make([]result, 4)
	deadline := time.Now().Add(10 * time.Second)
	for rfpCounter(r.srv.Stats(), "drops_total", "late") == 0 {
		if n := r.tr.Poll(r.now(), res); n > 0 {
			t.Fatalf("answered %#x although the claim took %v", res[0].Value, 3*spec.MaxResidence)
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither answered nor dropped: %+v", r.srv.Stats())
		}
		if rfpCounter(r.srv.Stats(), "drops_total", "expired") > 0 {
			r.tr.Expire(r.now() + time.Hour) // too old when swept: rewrite it
		}
		time.Sleep(time.Millisecond)
	}
	r.orc.delay.Store(0)
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
// slots (nor READ its records): the blocks live in the other session's
// protection domain, and the server's responder refuses the R_Key. The
// intruder's QP fails; the victim keeps being served.
func TestRFPIsolation(t *testing.T) {
	r := newRFPRig(t, "", "", 1, 4, 0)
	intruder := r.dial(t, "", 1, 4, 0)
	victim := r.grants[0]
	r.run(t, 50, 0)
	q := intruder.qps[0]
	spec.PutRFPSlot(intruder.slotMR.Bytes(), spec.RFPOpFetch, 1<<40)
	// WRITE the victim's slot 0 with the victim's key.
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
	r.run(t, 50, 0)
	if st := q.qp.State(); st != verbs.StateErr || r.tr.Broken() {
		t.Fatalf("intruder's QP %v, victim broken %v", st, r.tr.Broken())
	}
}

// BenchmarkRFP measures one request's round trip (WRITE, READs, the
// worker's claim and record) with 16 in flight on one QP; allocs/op
// counts the client's and the in-process server's allocations.
func BenchmarkRFP(b *testing.B) {
	r := newRFPRig(b, "", "", 1, 16, 0)
	capacity := r.tr.Free()
	free := make([]int, 0, capacity)
	for id := range capacity {
		free = append(free, id)
	}
	res := make([]result, 64)
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		now := r.now()
		if len(free) > 0 {
			n, err := r.tr.Send(now, free)
			if err != nil {
				b.Fatal(err)
			}
			free = free[n:]
		}
		n := r.tr.Poll(now, res)
		for _, x := range res[:n] {
			if x.Err != nil {
				b.Fatal(x.Err)
			}
			free = append(free, x.ID)
		}
		done += n
		r.tr.Expire(now)
	}
	b.StopTimer()
	b.ReportMetric(float64(r.tr.Reads)/float64(done), "reads/op")
	b.ReportMetric(float64(r.tr.Fallbacks)/float64(done), "fallbacks/op")
}
