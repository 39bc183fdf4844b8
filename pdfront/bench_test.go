package pdfront_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// BenchmarkTSO is a pd-tso-bench-style comparison in one run: c
// goroutines share one client and call for one timestamp at a time, first
// through PD's unmodified Go client and seqd-pd, then through seqd's
// native client, against the same seqd process. It reports the latency
// percentiles of single calls (p50, p99, in µs) and the throughput.
//
//	go test -run '^$' -bench TSO -benchtime 200000x ./pdfront/
func BenchmarkTSO(b *testing.B) {
	s := startProc(b, "-init", "-data", b.TempDir())
	waitRole(b, []*proc{s}, nil, "")
	_, addr, native := frontOver(b, []string{s.addr})
	pc := newPD(b, addr)
	pdGet := func(ctx context.Context) error { _, _, err := pc.GetTS(ctx); return err }
	nativeGet := func(ctx context.Context) error { _, err := native.GetTimestamp(ctx); return err }
	for _, c := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("pd/c=%d", c), func(b *testing.B) { runTSO(b, c, pdGet) })
		b.Run(fmt.Sprintf("native/c=%d", c), func(b *testing.B) { runTSO(b, c, nativeGet) })
	}
}

// runTSO makes b.N calls of get from c goroutines.
func runTSO(b *testing.B, c int, get func(context.Context) error) {
	ctx := context.Background()
	var mu sync.Mutex
	all := hdrhistogram.New(1, int64(10*time.Second/time.Nanosecond), 3)
	var wg sync.WaitGroup
	per := (b.N + c - 1) / c
	b.ResetTimer()
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hdrhistogram.New(1, int64(10*time.Second/time.Nanosecond), 3)
			for range per {
				t0 := time.Now()
				if err := get(ctx); err != nil {
					b.Error(err)
					return
				}
				h.RecordValue(int64(time.Since(t0)))
			}
			mu.Lock()
			all.Merge(h)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	n := float64(per * c)
	b.ReportMetric(float64(all.ValueAtQuantile(50))/1e3, "p50-µs")
	b.ReportMetric(float64(all.ValueAtQuantile(99))/1e3, "p99-µs")
	b.ReportMetric(n/el.Seconds(), "calls/s")
	b.ReportMetric(float64(el.Nanoseconds())/n, "ns/op")
}
