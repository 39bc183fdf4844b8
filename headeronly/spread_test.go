//go:build linux

package headeronly

import (
	"log/slog"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
)

// TestWorkersOwnQueues: with a device engine (a soft queue, a UDP socket)
// per worker, each worker's QPs (request, response and the sessions' own
// request QPs) are on its engine only, client QPs are spread over the
// workers, and every one is answered.
func TestWorkersOwnQueues(t *testing.T) {
	dev := claimtest.OpenSoft(t, "queues=2")
	s, err := New(Config{Config: wk.Config{Device: dev, Oracle: &fakeOracle{}, Behind: errBehind, Workers: 2,
		Logger: slog.New(slog.DiscardHandler)}, MaxWindow: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	port := func(w *worker) uint16 { return w.reqQP.Address().Port }
	if port(s.Workers[0]) == port(s.Workers[1]) {
		t.Fatalf("both workers' request QPs on port %d", port(s.Workers[0]))
	}
	for _, w := range s.Workers {
		for _, qp := range w.Resp.QPs() {
			if qp.Address().Port != port(w) {
				t.Errorf("worker %d: response QP %v on port %d, its engine's is %d", w.ID, qp.QPN(), qp.Address().Port, port(w))
			}
		}
	}
	var c benchClient
	defer c.Close()
	for range 4 {
		f, err := newBenchFlow(s)
		if err != nil {
			t.Fatal(err)
		}
		c.flows = append(c.flows, f)
	}
	for _, sess := range s.sessions {
		for i, q := range sess.rqs {
			w := s.Workers[sess.worker[i]]
			if q.qp.Address().Port != port(w) {
				t.Errorf("session %d: request QP on port %d, its worker %d's engine is on %d", sess.id, q.qp.Address().Port, w.ID, port(w))
			}
		}
	}
	if err := c.Send(64); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < 64; {
		k, err := c.Poll()
		if err != nil {
			t.Fatal(err)
		}
		got += k
		if time.Now().After(deadline) {
			t.Fatalf("%d of 64 answers", got)
		}
	}
	// A worker counts a batch after its doorbell: the answers may be
	// here before the counts.
	took := func(w *worker) bool { return w.Requests.Load()+w.Drops[wk.DropExpired].Load() > 0 }
	for _, w := range s.Workers {
		for !took(w) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !took(w) {
			drops := make([]uint64, len(w.Drops))
			for i := range w.Drops {
				drops[i] = w.Drops[i].Load()
			}
			t.Errorf("worker %d took no request: flows not spread (its drops by reason %v; the client gave up %d requests)", w.ID, drops, c.lost)
		}
	}
}
