package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/inprocess"
)

// BenchmarkClosedLoop runs the hot path — the slot callbacks on the
// client's engine, recording every answer for verification — against an
// in-process seqd. b.N counts answers; -benchmem shows the allocations per
// answer of the whole process (loadgen, client and server).
func BenchmarkClosedLoop(b *testing.B) {
	c := &Config{Spawn: true, SeqdBinary: InProcess, InProcess: inprocess.Spawn, Logger: quiet()}
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	srv, err := spawn(ctx, c, "spec-s0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stop()
	cl, err := client.Dial(ctx, srv.admin, client.WithWindow(64), client.WithLogger(quiet()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var pool chunkPool
	pool.reserve(b.N/chunkCalls + 2)
	d := newDriver(cl, 64, time.Now(), 0, int64(time.Hour), &pool, b.N+64*2, true)
	b.ReportAllocs()
	b.ResetTimer()
	if err := d.start(); err != nil {
		b.Fatal(err)
	}
	for cl.Stats().Answers < uint64(b.N) {
		time.Sleep(200 * time.Microsecond)
	}
	d.stop.Store(true)
	if err := d.wait(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(d.count)/b.Elapsed().Seconds()/1e6, "Mops")
	if d.errs != 0 || d.grew != 0 {
		b.Fatalf("errors %d (%v), chunks allocated in the loop %d", d.errs, d.firstErr, d.grew)
	}
}
