package client_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/verbs"
)

// cost measures what a benchmark's calls cost the client and the server:
// the process's CPU time (cpu_ns/op: the client's alone when the server
// runs in another process, SEQD_BENCH_ADMIN, as scripts/bench-client.sh
// runs it, else client's and server's together), its context switches
// (csw/op: blocks and preemptions) and its provider's syscalls
// (rxsys/op receiving, txsys/op sending); and, when SEQD_BENCH_PID names the server's process, the
// server's CPU time per call over the same interval (srv_cpu_ns/op) and
// the ratio of the two (cpu_ratio: client over server, same run).
type cost struct {
	c        *client.Client
	cpu      time.Duration
	csw      int64
	rx, tx   uint64
	srvPID   int
	srv      time.Duration
	srvKnown bool
}

func startCost(c *client.Client) *cost {
	m := &cost{c: c}
	if pid, err := strconv.Atoi(os.Getenv("SEQD_BENCH_PID")); err == nil {
		m.srvPID = pid
		m.srv, m.srvKnown = procCPU(pid)
	}
	m.rx, m.tx = m.syscalls()
	m.csw = switches()
	m.cpu = cpuTime()
	return m
}

func (m *cost) syscalls() (rx, tx uint64) {
	return client.ProviderCounter(m.c, verbs.CounterRxSyscalls), client.ProviderCounter(m.c, verbs.CounterTxSyscalls)
}

// report reports the costs per call since startCost.
func (m *cost) report(b *testing.B) {
	cpu := cpuTime() - m.cpu
	csw := switches() - m.csw
	n := float64(b.N)
	b.ReportMetric(float64(cpu)/n, "cpu_ns/op")
	b.ReportMetric(float64(csw)/n, "csw/op")
	rx, tx := m.syscalls()
	b.ReportMetric(float64(rx-m.rx)/n, "rxsys/op")
	b.ReportMetric(float64(tx-m.tx)/n, "txsys/op")
	if !m.srvKnown {
		return
	}
	srv, ok := procCPU(m.srvPID)
	if !ok || srv <= m.srv {
		return
	}
	b.ReportMetric(float64(srv-m.srv)/n, "srv_cpu_ns/op")
	b.ReportMetric(float64(cpu)/float64(srv-m.srv), "cpu_ratio")
}

func benchClient(b *testing.B, opts ...client.Option) *client.Client {
	b.Helper()
	addr := os.Getenv("SEQD_BENCH_ADMIN") // a seqd in another process
	if addr == "" {
		var stop func()
		addr, stop = startSeqd(b.TempDir())
		b.Cleanup(stop)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	// warm up past the server's start holdoff is not needed for
	// correctness; a few calls prime the speculation.
	for range 100 {
		if _, err := c.GetTimestamp(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// BenchmarkGetTimestamp is the serial round-trip latency of one client:
// ns/op is the mean; p50_us, p99_us and p999_us are percentiles of the
// calls (the mean on a shared machine is mostly its tail).
func BenchmarkGetTimestamp(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	h := hdrhistogram.New(1, int64(time.Second), 3)
	b.ReportAllocs()
	b.ResetTimer()
	m := startCost(c)
	for b.Loop() {
		t := time.Now()
		if _, err := c.GetTimestamp(ctx); err != nil {
			b.Fatal(err)
		}
		h.RecordValue(min(time.Since(t).Nanoseconds(), int64(time.Second)))
	}
	m.report(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
	for _, q := range []struct {
		p    float64
		unit string
	}{{50, "p50_us"}, {99, "p99_us"}, {99.9, "p999_us"}} {
		b.ReportMetric(float64(h.ValueAtQuantile(q.p))/1e3, q.unit)
	}
}

// BenchmarkPipelined keeps W requests outstanding with the asynchronous
// API: reusable Requests, no goroutine or allocation per request.
func BenchmarkPipelined(b *testing.B) {
	const w = 128
	c := benchClient(b, client.WithQPs(2), client.WithWindow(w/2))
	done := make(chan *client.Request, w)
	reqs := make([]client.Request, w)
	b.ReportAllocs()
	b.ResetTimer()
	m := startCost(c)
	inflight := 0
	issued := 0
	for i := range reqs {
		if issued == b.N {
			break
		}
		reqs[i].Done = done
		if err := c.Submit(&reqs[i]); err != nil {
			b.Fatal(err)
		}
		issued++
		inflight++
	}
	for inflight > 0 {
		r := <-done
		inflight--
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		if issued < b.N {
			if err := c.Submit(r); err != nil {
				b.Fatal(err)
			}
			issued++
			inflight++
		}
	}
	b.StopTimer()
	m.report(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
	if s := c.Stats(); s.Regressions != 0 {
		b.Fatalf("regressions: %+v", s)
	}
}

// BenchmarkPipelinedCallback is BenchmarkPipelined with each request
// submitted again from its Callback, on the goroutine driving the engine
// (as loadgen drives the client): no channel hand-off per call.
func BenchmarkPipelinedCallback(b *testing.B) {
	const w = 128
	c := benchClient(b, client.WithQPs(2), client.WithWindow(w/2))
	reqs := make([]client.Request, w)
	left := make(chan struct{})
	// The callbacks run one at a time, on the goroutine driving the
	// engine; mu orders their counts with the submitting loop below.
	var mu sync.Mutex
	issued, inflight := 0, 0
	var failed error
	cb := func(r *client.Request) {
		mu.Lock()
		defer mu.Unlock()
		inflight--
		if r.Err != nil && failed == nil {
			failed = r.Err
		}
		if issued < b.N && failed == nil {
			if err := c.Submit(r); err != nil {
				failed = err
			} else {
				issued++
				inflight++
			}
		}
		if inflight == 0 {
			close(left)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	m := startCost(c)
	mu.Lock()
	for i := range reqs {
		if issued == b.N {
			break
		}
		reqs[i].Callback = cb
		if err := c.Submit(&reqs[i]); err != nil {
			b.Fatal(err)
		}
		issued++
		inflight++
	}
	mu.Unlock()
	<-left
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	m.report(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
	if s := c.Stats(); s.Regressions != 0 {
		b.Fatalf("regressions: %+v", s)
	}
}
