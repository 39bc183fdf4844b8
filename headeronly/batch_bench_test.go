//go:build linux

package headeronly

import (
	"context"
	"log/slog"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// BenchmarkBatch measures one worker's user-space cost per request, with
// no transport: each iteration of the loop (poll, hand the send
// completions back, validate a batch of requests of `flows` client QPs,
// claim, build the answers, post them with the re-posted receives) runs
// against nullDev, whose CQ hands out the same batch of well-formed
// request completions and whose QPs take every post. b.N counts
// requests; cpu_ns/op is the thread's CPU time per request (the machine
// may be shared: wall time overstates it).
//
// serial is one request per poll, as a lone client's serial calls
// arrive: the cost of a batch of one, what each of its round trips pays.
func BenchmarkBatch(b *testing.B) {
	for _, c := range []struct {
		name       string
		flows, per int
	}{{"flows=1", 1, 0}, {"flows=60", 60, 0}, {"serial", 1, 1}} {
		b.Run(c.name, func(b *testing.B) {
			w, d := newNullWorker(b, c.flows, c.per)
			// CPU time, not wall time: the machine may be shared.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid, c0 := startCPU(b)
			b.ReportAllocs()
			b.ResetTimer()
			o := w.s.cfg.Oracle.(*claimtest.Oracle)
			for i := 0; i < b.N; i += len(d.cq.reqs) {
				d.cq.stamp = verbs.Now()
				// Guesses as clients make them: the high part of the
				// next value (a batch that crosses a rollover misses).
				d.cq.guess = spec.GuessOf((o.Current() + 1) >> spec.LowBits)
				n, err := w.poll()
				if err != nil || n < len(d.cq.reqs) {
					b.Fatalf("poll: %d, %v", n, err)
				}
				w.handle(w.wcs[:n])
			}
			b.StopTimer()
			reportCPU(b, w, tid, c0)
		})
	}
}

// startCPU is the calling thread's ID and its CPU time so far (the
// caller has locked its goroutine to the thread): reportCPU's start.
func startCPU(b *testing.B) (int, wk.CPU) {
	tid := unix.Gettid()
	c0, err := threadCPU(tid)
	if err != nil {
		b.Fatal(err)
	}
	return tid, c0
}

// reportCPU reports the CPU the benchmark's thread (tid) used per op
// since c0, and fails it unless w answered and dropped nothing but
// batches the machine held off its core past spec.MaxResidence.
func reportCPU(b *testing.B, w *worker, tid int, c0 wk.CPU) {
	c1, err := threadCPU(tid)
	if err != nil {
		b.Fatal(err)
	}
	u, k := c1.Sub(c0).PerOp(uint64(b.N))
	b.ReportMetric(u+k, "cpu_ns/op")
	t := w.s.totals()
	if t.Requests == 0 || sum(t.Drops) > t.Drops["expired"]+t.Drops["late"] {
		b.Fatalf("answered %d, drops %v", t.Requests, t.Drops)
	}
}

// newNullWorker makes a server on nullDev without starting its worker
// (the benchmark runs its loop), admits flows client QPs, each with its
// own request QP, and loads the CQ with one batch: per requests of each
// ((Batch-4)/flows when per is 0).
func newNullWorker(b testing.TB, flows, per int) (*worker, *nullDev) {
	return newNullWorkerRecv(b, flows, per, false)
}

// newNullWorkerRecv is newNullWorker, with the worker's one shared
// request QP (Config.SharedRecv) instead when shared.
func newNullWorkerRecv(b testing.TB, flows, per int, shared bool) (*worker, *nullDev) {
	d := &nullDev{}
	d.cq = &nullCQ{}
	cfg, err := Config{Config: wk.Config{Device: d, Oracle: &claimtest.Oracle{}, Behind: claimtest.ErrBehind,
		Logger: slog.New(slog.DiscardHandler)}, MaxWindow: 256, SharedRecv: shared}.validate()
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sessions: map[uint64]*session{}, start: time.Now()}
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
	w.guard = spec.NewGuard(-spec.Holdoff) // confirmations from the start, as in steady state
	if per == 0 {
		per = (cfg.Batch - 4) / flows // room for the send completions in a poll
	}
	if shared {
		// Admission waits for the worker to post the shared queue's
		// receives; it is not running, and its first poll posts them.
		w.filled.Store(1 << 30)
	}
	for f := range flows {
		addr := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1")), Port: uint16(10000 + f)}
		qpn := verbs.QPN(0x1000 + f)
		_, rqs, err := s.admitLocked(context.Background(), handshake.Admission{Window: per,
			QPs: []handshake.Endpoint{{Addr: addr, QPN: qpn}}}, handshake.SessionRef{})
		if err != nil {
			b.Fatal(err)
		}
		w.takeInbox(false)
		if shared {
			// Receives of the shared queue, one slot per request.
			for i := range per {
				d.cq.reqs = append(d.cq.reqs, verbs.WC{ID: w.shared.serial<<32 | uint64(f*per+i), Status: verbs.WCSuccess, Opcode: verbs.WCRecv,
					Flags: verbs.WCWithImm, ByteLen: verbs.GRHLen + spec.RequestLen, QPN: w.shared.qpn,
					SrcQP: qpn, Src: addr})
			}
			continue
		}
		q := rqs[0]
		// The receives it posted first, in the order fill took them
		// (Poll gives them their immediates).
		for i := range per {
			d.cq.reqs = append(d.cq.reqs, verbs.WC{ID: q.wrs[i].ID, Status: verbs.WCSuccess, Opcode: verbs.WCRecv,
				Flags: verbs.WCWithImm, ByteLen: verbs.GRHLen + spec.RequestLen, QPN: q.qpn,
				SrcQP: qpn, Src: addr})
		}
	}
	b.Cleanup(func() {
		w.Close()
		s.AHs.Close()
	})
	return w, d
}

// nullDev is a verbs device that moves nothing: its one CQ hands out
// reqs on every poll (stamped, each with the next tag and the current
// guess), after the completions of the signaled sends posted since the
// last poll; its QPs take every post.
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

type nullCQ struct {
	reqs  []verbs.WC
	sends []verbs.WC
	stamp verbs.Time
	guess spec.Guess // every request's (the benchmark keeps it current)
	tag   spec.Tag   // the next request's: consecutive, as a client's are
}

func (c *nullCQ) Poll(wc []verbs.WC) (int, error) {
	n := copy(wc, c.sends)
	c.sends = c.sends[:copy(c.sends, c.sends[n:])]
	m := copy(wc[n:], c.reqs)
	for i := range wc[n : n+m] {
		wc[n+i].Arrived = c.stamp
		wc[n+i].Imm = uint32(spec.MustRequestImm(c.tag, c.guess))
		c.tag = (c.tag + 1) % spec.NumTags
	}
	return n + m, nil
}
func (c *nullCQ) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (c *nullCQ) Close() error                   { return nil }

// TestWindowPerBatch: with a shared request QP (Config.SharedRecv),
// whose receives do not bound one client QP's requests, a QP's requests
// are counted against its window per batch. Batches of exactly the
// window, one after another, are answered whole; one request over it in
// a batch is dropped alone. (A QP's own request QP holds just its
// window of receives: TestWindowAtAllTimes.)
func TestWindowPerBatch(t *testing.T) {
	w, d := newNullWorkerRecv(t, 2, 8, true) // two QPs, window 8, 8 requests each per poll
	o := w.s.cfg.Oracle.(*claimtest.Oracle)
	run := func() {
		d.cq.stamp = verbs.Now()
		d.cq.guess = spec.GuessOf((o.Current() + 1) >> spec.LowBits)
		n, err := w.poll()
		if err != nil {
			t.Fatal(err)
		}
		w.handle(w.wcs[:n])
	}
	for range 3 {
		run()
	}
	if tot := w.s.totals(); tot.Requests != 3*16 || sum(tot.Drops) != 0 {
		t.Fatalf("three batches at the window: answered %d of 48, drops %v", tot.Requests, tot.Drops)
	}
	d.cq.reqs = append(d.cq.reqs, d.cq.reqs[0]) // a ninth request of the first QP
	run()
	if tot := w.s.totals(); tot.Requests != 3*16+16 || tot.Drops["window"] != 1 || sum(tot.Drops) != 1 {
		t.Fatalf("a batch one over the window: answered %d of 64, drops %v", tot.Requests, tot.Drops)
	}
}
