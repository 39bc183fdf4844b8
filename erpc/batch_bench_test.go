package erpc

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// BenchmarkBatch measures the server's burst path (batch: decode,
// peer and session check, slot state, one claim, preallocated answers,
// one post) with no transport: a null device whose QPs take every post.
// b.N counts requests. fresh: every request a new request number;
// resend: every request a retransmission answered from its slot.
// allocs/op must be 0.
func BenchmarkBatch(b *testing.B) {
	for _, c := range []struct {
		name   string
		flows  int
		resend bool
	}{{"flows=1", 1, false}, {"flows=32", 32, false}, {"resend", 32, true}} {
		b.Run(c.name, func(b *testing.B) {
			w, wcs, next := newNullWorker(b, c.flows)
			bursts(b, w, wcs, next, !c.resend)
			t := wk.Total(w.s.Workers)
			if t.Requests == 0 {
				b.Fatalf("nothing answered: drops %v", t.Drops)
			}
		})
	}
}

// BenchmarkBatchFactors is the server's side of the thesis's factor
// analysis (Table 6.2): BenchmarkBatch's burst path, 32 flows of 8
// fresh requests, with every optimization, and with zero-copy receive
// and preallocated answers each turned off in turn. b.N counts requests;
// scripts/bench-erpc.sh (PARTS factors) reports Mops as a ratio to all
// on, same round.
func BenchmarkBatchFactors(b *testing.B) {
	for _, c := range []struct {
		name string
		off  factors
	}{{"all_on", factors{}}, {"zero_copy=off", factors{zeroCopy: true}}, {"prealloc=off", factors{prealloc: true}}} {
		b.Run(c.name, func(b *testing.B) {
			w, wcs, next := newNullWorker(b, 32)
			w.off = c.off
			bursts(b, w, wcs, next, true)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
			if t := wk.Total(w.s.Workers); t.Requests == 0 {
				b.Fatalf("nothing answered: drops %v", t.Drops)
			}
		})
	}
}

// bursts runs b.N requests through w's burst path, a burst of wcs at a
// time, each request a new request number (fresh) or a retransmission
// answered from its slot.
func bursts(b *testing.B, w *worker, wcs []verbs.WC, next func(), fresh bool) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(wcs) {
		if fresh {
			next() // new request numbers
		}
		now := verbs.Now()
		for j := range wcs {
			wcs[j].Arrived = now
		}
		w.ReapSends()
		w.batch(wcs)
	}
	b.StopTimer()
}

// newNullWorker makes a server on a null device without running its
// worker, admits flows session endpoints of 8 credits, and builds one
// burst of 8 requests from each (slot i, request number 1) in the
// worker's receive buffers. next moves every request to its slot's next
// request number.
func newNullWorker(b testing.TB, flows int) (*worker, []verbs.WC, func()) {
	d := &nullDev{cq: &nullCQ{}}
	cfg, err := Config{Config: wk.Config{Device: d, Oracle: &claimtest.Oracle{}, Behind: claimtest.ErrBehind,
		Logger: slog.New(slog.DiscardHandler)}}.validate()
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sessions: map[uint64]*session{}, start: time.Now(), buffer: -1}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.PD, err = d.AllocPD(); err != nil {
		b.Fatal(err)
	}
	s.AHs = ahcache.New(s.PD, 0)
	w, err := newWorker(s, 0)
	if err != nil {
		b.Fatal(err)
	}
	s.Workers = []*worker{w}
	var wcs []verbs.WC
	var sessions []uint64
	for f := range flows {
		a := verbs.Address{GID: verbs.GID{15: byte(f + 1)}, Port: 5000}
		qpn := verbs.QPN(0x10 + f)
		g, err := s.Admit(context.Background(), handshake.Admission{QPs: []handshake.Endpoint{{Addr: a, QPN: qpn}}}, handshake.SessionRef{})
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, g.Session)
		for range spec.ERPCSlots {
			wcs = append(wcs, verbs.WC{ID: uint64(len(wcs)), Status: verbs.WCSuccess, Opcode: verbs.WCRecv,
				ByteLen: uint32(verbs.GRHLen + spec.ERPCRequestLen), Src: a, SrcQP: qpn})
		}
	}
	rn := uint64(0)
	next := func() {
		rn++
		buf := w.RecvMR.Bytes()
		for i := range wcs {
			off := i*recvSlot + verbs.GRHLen
			spec.PutERPCHeader(buf[off:off+spec.ERPCRequestLen], spec.ERPCHeader{Op: spec.ERPCOpRequest,
				Slot: i % spec.ERPCSlots, Count: 1, Session: sessions[i/spec.ERPCSlots], ReqNum: rn})
		}
	}
	next()
	return w, wcs, next
}

type nullDev struct {
	cq   *nullCQ
	qpns atomic.Uint32
}

func (d *nullDev) Name() string { return "null" }
func (d *nullDev) Attr() verbs.DeviceAttr {
	return verbs.DeviceAttr{MaxQPWR: 1 << 15, SourcePorts: true}
}
func (d *nullDev) AllocPD() (verbs.PD, error)     { return &nullPD{d}, nil }
func (d *nullDev) CreateCQ(int) (verbs.CQ, error) { return d.cq, nil }
func (d *nullDev) Close() error                   { return nil }

type nullPD struct{ d *nullDev }

func (p *nullPD) RegMR(n int, _ verbs.Access) (verbs.MR, error) {
	return &nullMR{b: make([]byte, n)}, nil
}
func (p *nullPD) CreateAH(verbs.AHAttr) (verbs.AH, error) { return nullAH{}, nil }
func (p *nullPD) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	return &nullQP{d: p.d, qpn: verbs.QPN(0x100 + p.d.qpns.Add(1))}, nil
}
func (p *nullPD) Close() error { return nil }

type nullMR struct{ b []byte }

func (m *nullMR) Bytes() []byte { return m.b }
func (m *nullMR) Addr() uint64  { return uint64(uintptr(unsafe.Pointer(&m.b[0]))) }
func (m *nullMR) LKey() uint32  { return 1 }
func (m *nullMR) RKey() uint32  { return 1 }
func (m *nullMR) Close() error  { return nil }

type nullAH struct{}

func (nullAH) Close() error { return nil }

type nullQP struct {
	d   *nullDev
	qpn verbs.QPN
}

func (q *nullQP) QPN() verbs.QPN                               { return q.qpn }
func (q *nullQP) Type() verbs.QPType                           { return verbs.UD }
func (q *nullQP) State() verbs.QPState                         { return verbs.StateRTS }
func (q *nullQP) Address() verbs.Address                       { return verbs.Address{} }
func (q *nullQP) Modify(*verbs.QPAttr, verbs.QPAttrMask) error { return nil }
func (q *nullQP) PostRecv(wrs []verbs.RecvWR) (int, error)     { return len(wrs), nil }
func (q *nullQP) Close() error                                 { return nil }

func (q *nullQP) PostSend(wrs []verbs.SendWR) (int, error) {
	for i := range wrs {
		if wrs[i].Flags&verbs.Signaled != 0 {
			q.d.cq.sends = append(q.d.cq.sends, verbs.WC{ID: wrs[i].ID, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPN: q.qpn})
		}
	}
	return len(wrs), nil
}

// nullCQ hands out the completions of the signaled sends posted.
type nullCQ struct{ sends []verbs.WC }

func (c *nullCQ) Poll(wc []verbs.WC) (int, error) {
	n := copy(wc, c.sends)
	c.sends = c.sends[:copy(c.sends, c.sends[n:])]
	return n, nil
}
func (c *nullCQ) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (c *nullCQ) Close() error                   { return nil }
