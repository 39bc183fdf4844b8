package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

// BenchmarkSpecMisses keeps W requests in flight on one Spec-S0 QP and
// reports the share of answers that carried the full value (misses/op),
// without and with the client's prediction of the high part's advance,
// interleaved against one server (past its start holdoff).
func BenchmarkSpecMisses(b *testing.B) {
	addrs := startServer(b, server.Config{})
	time.Sleep(spec.Holdoff + 100*time.Millisecond) // confirmations start after the holdoff
	defer func() { predictHigh = true }()
	for _, w := range []int{1, 8, 32, 64, 256} {
		for _, predict := range []bool{false, true} {
			name := "old"
			if predict {
				name = "predict"
			}
			b.Run(fmt.Sprintf("W=%d/%s", w, name), func(b *testing.B) {
				predictHigh = predict
				c := dialT(b, addrs.Admin, WithQPs(1), WithWindow(w))
				done := make(chan *Request, w)
				reqs := make([]Request, w)
				for i := range reqs {
					reqs[i].Done = done
				}
				ctx := context.Background()
				for range 100 { // learn the high part and its phase
					if _, err := c.GetTimestamp(ctx); err != nil {
						b.Fatal(err)
					}
				}
				before := c.Stats()
				b.ResetTimer()
				inflight, issued := 0, 0
				for i := range reqs {
					if issued == b.N {
						break
					}
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
				after := c.Stats()
				b.ReportMetric(float64(after.SpecMisses-before.SpecMisses)/float64(b.N), "misses/op")
				if after.Regressions != 0 {
					b.Fatalf("regressions: %+v", after)
				}
			})
		}
	}
}
