package herd

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// sweepRig is one stopped worker with nqps admitted client QPs of the
// given window: the benchmarks call its collect directly, with no
// worker running.
func sweepRig(b *testing.B, nqps, window int) (*worker, []*hclient) {
	b.Helper()
	srv, err := New(Config{Config: wk.Config{Device: open(b, ""), Oracle: &fakeOracle{}, Workers: 1,
		Logger: slog.New(slog.DiscardHandler)}, MaxQPs: nqps, MaxWindow: window})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	for i := range nqps {
		ip := netip.AddrFrom4([4]byte{127, 2, byte(i >> 8), byte(i)})
		a := verbs.Address{GID: verbs.GIDFromAddr(ip), Port: 4791}
		adm := handshake.Admission{Name: fmt.Sprint("bench", i), Window: window, ConnQPs: []handshake.Endpoint{{Addr: a, QPN: 0x100}},
			QPs: []handshake.Endpoint{{Addr: a, QPN: 0x101}}}
		if _, err := srv.Admit(context.Background(), adm, handshake.SessionRef{}); err != nil {
			b.Fatal(err)
		}
	}
	srv.Stop()
	w := srv.Workers[0]
	return w, *w.clients.Load()
}

// BenchmarkCollect is the worker's sweep with every slot of 64 client
// QPs × window 16 holding a new request: ns/op is one round of 1,024
// requests (collected in batches of wk.DefaultBatch, then one sweep that
// finds the slots empty); ns/req is per request.
func BenchmarkCollect(b *testing.B) {
	const nqps, window = 64, 16
	w, clients := sweepRig(b, nqps, window)
	var buf [spec.SlotLen]byte
	seq := spec.Seq(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		w.collect() // an empty sweep: every client's arrival bound is now
		seq = seq.Next()
		spec.PutSlot(buf[:], seq)
		word := spec.SlotWord(buf[:])
		for _, c := range clients {
			for pos := range window {
				atomic.StoreUint64(w.slot(c, pos), word)
			}
		}
		b.StartTimer()
		got := -int(w.Drops[wk.DropExpired].Load()) // a descheduled round's requests expire
		for {
			n := w.collect()
			if n == 0 {
				break
			}
			got += n
		}
		if got += int(w.Drops[wk.DropExpired].Load()); got != nqps*window {
			b.Fatalf("collected %d of %d requests (drops %v)", got, nqps*window, wk.Total(w.s.Workers).Drops)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nqps*window), "ns/req")
}

// BenchmarkSweepIdle is one sweep of 64 client QPs × window 16 empty
// slots: ns/slot is the cost of a slot with no request.
func BenchmarkSweepIdle(b *testing.B) {
	const nqps, window = 64, 16
	w, _ := sweepRig(b, nqps, window)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n := w.collect(); n != 0 {
			b.Fatalf("collected %d requests from empty slots", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nqps*window), "ns/slot")
}
