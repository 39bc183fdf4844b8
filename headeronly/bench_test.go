//go:build linux

package headeronly

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/echo"
)

// The cores BenchmarkServe pins the server (seqd's worker, or the echo
// floor's loop) and the client to; -1 leaves a side unpinned.
var (
	benchSrvCore = flag.Int("bench.srvcore", 1, "core of the server thread in BenchmarkServe (-1: unpinned)")
	benchCliCore = flag.Int("bench.clicore", 0, "core of the client thread in BenchmarkServe (-1: unpinned)")
	benchWorkers = flag.Int("bench.workers", 1, "seqd workers in BenchmarkServe's seqd runs")
	benchSpin    = flag.Duration("bench.spin", 0, "seqd workers' Spin in BenchmarkServe (0: the default)")
)

// BenchmarkServe measures one seqd worker core against the transport's
// floor, in one run: the same lean client (echo.Drive: 256 header-only
// requests in flight, posted 64 at a time, over the soft provider) drives
//
//   - floor: the provider's header-only echo server (echo.Serve), and
//   - seqd/flows=F: a Spec-S0 server (one worker) whose clients are F
//     client QPs, each on a device (a UDP socket, a flow) of its own,
//     every batch of requests spread over all of them,
//
// each server on core -bench.srvcore, the client on -bench.clicore. b.N
// counts requests; Mops is millions answered per second. The server
// thread's CPU time per request is reported split into user and kernel
// (srv_user_ns, srv_sys_ns: the scheduler's run time divided in the ratio
// of /proc's utime and stime). allocs/op counts the whole process,
// client included.
func BenchmarkServe(b *testing.B) {
	b.Run("floor", func(b *testing.B) {
		cli, srv, err := echo.VerbsPair("soft", "127.0.0.1:0", nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		defer srv.Close()
		var stop atomic.Bool
		var tid atomic.Int32
		var wg sync.WaitGroup
		var srvErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pinThread(b, *benchSrvCore)()
			tid.Store(int32(unix.Gettid()))
			srvErr = echo.Serve(srv, &stop)
		}()
		for tid.Load() == 0 {
			runtime.Gosched()
		}
		runServe(b, cli, int(tid.Load()), nil)
		stop.Store(true)
		wg.Wait()
		if srvErr != nil {
			b.Fatal(srvErr)
		}
	})
	for _, flows := range []int{1, 16} {
		b.Run(fmt.Sprintf("seqd/flows=%d", flows), func(b *testing.B) {
			s, cli := newBenchServer(b, flows, *benchWorkers)
			w := s.Workers[0]
			c0 := devCounters(s.cfg.Device)
			r0 := s.totals().Requests
			runServe(b, cli, w.Tid(), func() uint64 { return s.totals().Requests })
			c1 := devCounters(s.cfg.Device)
			reqs := float64(s.totals().Requests - r0)
			for _, name := range []string{verbs.CounterRxSyscalls, verbs.CounterTxSyscalls, "rx_datagrams", "tx_datagrams"} {
				b.ReportMetric(float64(c1[name]-c0[name])/reqs, name+"/op")
			}
			if d := s.totals().Drops; sum(d) > 0 {
				b.Logf("drops: %v", d)
			}
			var misses uint64
			for _, w := range s.Workers {
				misses += w.stats.specMisses.Load()
			}
			b.ReportMetric(float64(misses)/float64(s.totals().Requests), "miss/op")
		})
	}
}

// devCounters reads a device's counters (verbs.Counters), if it has any.
func devCounters(d verbs.Device) map[string]uint64 {
	m := map[string]uint64{}
	if c, ok := d.(verbs.Counters); ok {
		c.VisitCounters(func(name string, v uint64) { m[name] = v })
	}
	return m
}

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

// runServe drives cli for b.N requests on the client core and reports
// Mops and the server thread's (tid's) CPU time per request. served,
// when set, counts the requests the server answered (else b.N).
func runServe(b *testing.B, cli echo.Side, tid int, served func() uint64) {
	b.Helper()
	var s0 uint64
	if served != nil {
		s0 = served()
	}
	c0, err := threadCPU(tid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var n int
	var el time.Duration
	func() {
		defer pinThread(b, *benchCliCore)()
		n, el, err = echo.Drive(cli, b.N, 0)
	}()
	b.StopTimer()
	c1, cerr := threadCPU(tid)
	if err != nil {
		b.Fatalf("%d of %d: %v", n, b.N, err)
	}
	if cerr != nil {
		b.Fatal(cerr)
	}
	reqs := uint64(n)
	if served != nil {
		reqs = served() - s0
	}
	u, k := c1.Sub(c0).PerOp(reqs)
	answered := uint64(n)
	if bc, ok := cli.(*benchClient); ok {
		answered -= bc.lost
		b.ReportMetric(float64(bc.lost)/float64(n), "lost/op")
	}
	b.ReportMetric(float64(answered)/el.Seconds()/1e6, "Mops")
	b.ReportMetric(u, "srv_user_ns")
	b.ReportMetric(k, "srv_sys_ns")
}

// threadCPU is wk.ThreadCPU, or nothing for tid 0 (an unpinned server,
// whose thread is not its own).
func threadCPU(tid int) (wk.CPU, error) {
	if tid == 0 {
		return wk.CPU{}, nil
	}
	return wk.ThreadCPU(tid)
}

// pinThread locks the calling goroutine to its thread and, for core >= 0,
// binds the thread to core; the function it returns undoes both.
func pinThread(b *testing.B, core int) func() {
	runtime.LockOSThread()
	if core < 0 {
		return runtime.UnlockOSThread
	}
	if err := wk.Pin(core); err != nil {
		b.Logf("running unpinned: %v", err)
		return runtime.UnlockOSThread
	}
	return func() {
		// The thread goes back to the pool: let it run anywhere again.
		var all unix.CPUSet
		for c := range runtime.NumCPU() {
			all.Set(c)
		}
		unix.SchedSetaffinity(0, &all)
		runtime.UnlockOSThread()
	}
}

// newBenchServer starts a Spec-S0 server with workers workers (the
// first pinned to -bench.srvcore), connects flows client QPs to it, each
// on a soft device of its own, and waits out the speculation guard's
// holdoff so that answers confirm guesses, as in steady state.
func newBenchServer(b *testing.B, flows, workers int) (*Server, *benchClient) {
	b.Helper()
	dev := claimtest.OpenSoft(b, fmt.Sprintf("queues=%d", workers)) // an engine per worker
	var cores []int
	if *benchSrvCore >= 0 {
		cores = []int{*benchSrvCore}
		for i := 1; i < workers; i++ {
			cores = append(cores, (*benchSrvCore+i)%runtime.NumCPU())
		}
	}
	s, err := New(Config{Config: wk.Config{Device: dev, Oracle: &claimtest.Oracle{}, Behind: claimtest.ErrBehind,
		Workers: workers, Cores: cores, Logger: slog.New(slog.DiscardHandler)}, MaxWindow: echo.Window, Spin: *benchSpin})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	c := &benchClient{}
	b.Cleanup(c.Close)
	for range flows {
		f, err := newBenchFlow(s)
		if err != nil {
			b.Fatal(err)
		}
		c.flows = append(c.flows, f)
	}
	for _, w := range s.Workers {
		for w.Tid() == 0 && *benchSrvCore >= 0 {
			runtime.Gosched()
		}
	}
	time.Sleep(spec.Holdoff + 100*time.Millisecond)
	return s, c
}

// benchClient is a lean Spec-S0 client over verbs: every Send spreads
// its requests over the flows, one chain per flow; Poll counts answers
// (learning the high part from full ones, for the next guesses) and
// re-posts their receives.
type benchClient struct {
	flows []*benchFlow
	next  int
	// Requests the server dropped (a batch older than spec.MaxResidence
	// on a loaded machine) are written off after lostAfter without an
	// answer to their flow, so that the window does not leak: Poll counts
	// them as done, and lost.
	lost  uint64
	polls int
}

// lostAfter: no answer leaves the server later than spec.MaxResidence
// after its request arrived, so twice that without one means the
// outstanding requests were dropped.
const lostAfter = 2 * spec.MaxResidence

type benchFlow struct {
	dev  verbs.Device
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	ah   verbs.AH
	swr  []verbs.SendWR
	rwr  []verbs.RecvWR
	sges []verbs.SGE
	wc   []verbs.WC
	n    int // requests to send in the current Send
	out  int // requests outstanding
	last time.Time
	tag  uint32
	high uint64
	rnxt int
}

const benchSlot = 64

func newBenchFlow(s *Server) (f *benchFlow, err error) {
	f = &benchFlow{}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	const depth = 2 * echo.Window
	if f.dev, err = verbs.Open("soft", "127.0.0.1:0", nil); err != nil {
		return nil, err
	}
	if f.pd, err = f.dev.AllocPD(); err != nil {
		return nil, err
	}
	if f.cq, err = f.dev.CreateCQ(2 * depth); err != nil {
		return nil, err
	}
	if f.qp, err = f.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: f.cq, RecvCQ: f.cq,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	g, err := s.Admit(context.Background(), handshake.Admission{Name: "bench", Window: echo.Window,
		QPs: []handshake.Endpoint{{Addr: f.qp.Address(), QPN: f.qp.QPN()}}}, handshake.SessionRef{})
	if err != nil {
		return nil, err
	}
	if err = verbs.BringUpUD(f.qp, g.AnswerQKey, 0); err != nil {
		return nil, err
	}
	to := g.ServerQPs[g.Assignment[0]]
	if f.ah, err = f.pd.CreateAH(verbs.AHAttr{Dest: to.Addr}); err != nil {
		return nil, err
	}
	if f.mr, err = f.pd.RegMR(depth*benchSlot, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	f.high = g.High >> spec.LowBits
	f.swr = make([]verbs.SendWR, echo.Window)
	for i := range f.swr {
		f.swr[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: f.ah, RemoteQPN: to.QPN, RemoteQKey: g.QKey}
	}
	f.rwr = make([]verbs.RecvWR, depth)
	f.sges = make([]verbs.SGE, depth)
	f.wc = make([]verbs.WC, depth)
	for i := range f.rwr {
		f.sges[i] = verbs.SGE{Addr: f.mr.Addr() + uint64(i*benchSlot), Length: benchSlot, LKey: f.mr.LKey()}
		f.rwr[i] = verbs.RecvWR{ID: uint64(i), SG: f.sges[i : i+1]}
	}
	return f, f.postRecvs(depth)
}

func (f *benchFlow) postRecvs(n int) error {
	for n > 0 {
		k := min(n, len(f.rwr)-f.rnxt)
		if _, err := f.qp.PostRecv(f.rwr[f.rnxt : f.rnxt+k]); err != nil {
			return err
		}
		n -= k
		f.rnxt = (f.rnxt + k) % len(f.rwr)
	}
	return nil
}

// Send implements echo.Side.
func (c *benchClient) Send(n int) error {
	for i := range n {
		c.flows[(c.next+i)%len(c.flows)].n++
	}
	c.next = (c.next + n) % len(c.flows)
	for _, f := range c.flows {
		if f.n == 0 {
			continue
		}
		g := spec.GuessOf(f.high)
		for i := range f.swr[:f.n] {
			f.swr[i].Imm = uint32(spec.Imm(f.tag%spec.NumTags)<<spec.LowBits) | uint32(g)
			f.tag++
		}
		k, err := f.qp.PostSend(f.swr[:f.n])
		if k != f.n {
			return fmt.Errorf("post %d requests: %d posted: %v", f.n, k, err)
		}
		if f.out == 0 {
			f.last = time.Now()
		}
		f.out += f.n
		f.n = 0
	}
	return nil
}

// Poll implements echo.Side.
func (c *benchClient) Poll() (int, error) {
	total := 0
	c.polls++
	var now time.Time
	if c.polls%64 == 0 {
		now = time.Now()
	}
	for _, f := range c.flows {
		n, err := f.cq.Poll(f.wc)
		if err != nil {
			return total, err
		}
		k := 0
		for i := range f.wc[:n] {
			wc := &f.wc[i]
			if wc.Status != verbs.WCSuccess {
				return total, fmt.Errorf("completion %v", wc.Status)
			}
			if wc.Opcode != verbs.WCRecv {
				continue
			}
			k++
			if wc.ByteLen == verbs.GRHLen+spec.FullLen {
				off := int(wc.ID)*benchSlot + verbs.GRHLen
				f.high = binary.BigEndian.Uint64(f.mr.Bytes()[off:off+8]) >> spec.LowBits
			}
		}
		if k > 0 {
			if err := f.postRecvs(k); err != nil {
				return total, err
			}
			f.out -= k
			if !now.IsZero() {
				f.last = now
			}
		} else if !now.IsZero() && f.out > 0 && now.Sub(f.last) > lostAfter {
			c.lost += uint64(f.out)
			k, f.out = f.out, 0
		}
		total += k
	}
	return total, nil
}

// Close implements echo.Side.
func (c *benchClient) Close() {
	for _, f := range c.flows {
		f.Close()
	}
	c.flows = nil
}

func (f *benchFlow) Close() {
	for _, x := range []interface{ Close() error }{f.ah, f.qp, f.mr, f.cq, f.pd, f.dev} {
		if x != nil {
			x.Close()
		}
	}
}
