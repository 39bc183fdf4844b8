package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/modes"
)

// BenchmarkModes reports, per registered mode, the single-client serial latency
// (ns/op of one GetTimestamp at a time) and one-process throughput
// (parallel callers over one client).
func BenchmarkModes(b *testing.B) {
	for _, mode := range modes.All {
		addr := startMode(b, "", mode)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		c, err := client.Dial(ctx, addr, client.WithQPs(2), client.WithWindow(32), client.WithLogger(quietLogger()))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.GetTimestamp(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.GetTimestamp(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		c.Close()
		cancel()
	}
}
