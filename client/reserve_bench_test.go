package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

// BenchmarkGetRange compares, against one fasst server in one run,
// serial GetTimestamp calls with serial GetRange calls of k values:
// values/s is what one caller gets; every op is one round trip.
//
//	go test -run '^$' -bench GetRange -benchtime 3s ./client/
func BenchmarkGetRange(b *testing.B) {
	a := startServer(b, server.Config{Mode: spec.ModeFaSST})
	c := dialT(b, a.Admin)
	ctx := context.Background()
	for range 100 {
		if _, err := c.GetTimestamp(ctx); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, k int, get func() error) {
		b.ReportAllocs()
		start := time.Now()
		n := 0
		for b.Loop() {
			if err := get(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n*k)/time.Since(start).Seconds(), "values/s")
	}
	b.Run("GetTimestamp", func(b *testing.B) {
		run(b, 1, func() error { _, err := c.GetTimestamp(ctx); return err })
	})
	for _, k := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("GetRange/k=%d", k), func(b *testing.B) {
			run(b, k, func() error { _, err := c.GetRange(ctx, k); return err })
		})
	}
}
