//go:build linux

package headeronly

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// BenchmarkBatchRecv compares the worker's user-space cost per request
// (as BenchmarkBatch measures it: no transport, the null device) with
// per-session request QPs and with one shared request QP per worker
// (Config.SharedRecv), at 1, 64 and 1024 client QPs. Each poll hands the
// worker Batch-4 requests: all of one QP's at 1 flow, 3 of each of 64
// QPs' at 64, and one each of 252 QPs' at 1024, the next 252 at the next
// poll, round the 1024 (every QP's state is touched in turn, as 1024
// flows' requests arrive). Per session, a batch re-posts one chain of
// receives per QP it holds requests of; shared, one chain. cpu_ns/op is
// the worker thread's CPU time per request.
func BenchmarkBatchRecv(b *testing.B) {
	for _, shared := range []bool{false, true} {
		for _, flows := range []int{1, 64, 1024} {
			b.Run(fmt.Sprintf("%s/flows=%d", recvName(shared), flows), func(b *testing.B) {
				per := 0 // (Batch-4)/flows
				if flows > wk.DefaultBatch-4 {
					per = 1
				}
				w, d := newNullWorkerRecv(b, flows, per, shared)
				all := d.cq.reqs
				n := min(len(all), w.s.cfg.Batch-4)
				ring := append(append([]verbs.WC(nil), all...), all[:n]...)
				off := 0
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				tid, c0 := startCPU(b)
				o := w.s.cfg.Oracle.(*claimtest.Oracle)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i += n {
					d.cq.reqs = ring[off : off+n]
					off = (off + n) % len(all)
					d.cq.stamp = verbs.Now()
					d.cq.guess = spec.GuessOf((o.Current() + 1) >> spec.LowBits)
					got, err := w.poll()
					if err != nil || got < n {
						b.Fatalf("poll: %d of %d, %v", got, n, err)
					}
					w.handle(w.wcs[:got])
				}
				b.StopTimer()
				reportCPU(b, w, tid, c0)
			})
		}
	}
}
