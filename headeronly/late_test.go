package headeronly

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestLateAnswerAfterFinalCheck (issue 26, item 7): an answer delayed
// after the worker's final residence check (the Late hook: a worker
// descheduled there, or a flush waiting for socket room) until its
// client has reused the answer's tag for a later call must not complete
// that call. Client A's first call C1 is claimed v1 and its answer held
// at the hook; A gives C1 up; client B (on the other worker) then gets
// and returns vB > v1; then 256 calls of A start, unanswered while A's
// worker is held, and retransmit under fresh tags until A's QP has gone
// once round the tag space and sent C1's tag T0 again, for one of these
// calls. Then the held answer is let go. Before the send deadline it
// left and completed that call with v1 (or with v1's low bits under the
// new guess's high part), though the call started after B's returned
// vB > v1: the verifier reports real-time order broken. With the
// deadline the provider drops it (counted late).
func TestLateAnswerAfterFinalCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about a second")
	}
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: &fakeOracle{}, Behind: errBehind, Workers: 2},
		MaxWindow: 256, MaxRecv: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_, addr := admintest.Start(t, admin.Config{}, pb(s))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window, retransmit = 256, 40 * time.Millisecond
	dial := func() *client.Client {
		c, err := client.Dial(ctx, addr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithQPs(1),
			client.WithWindow(window), client.WithRetransmit(retransmit), client.WithTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := dial(), dial() // round robin: one QP on each worker
	var v verify.History
	origin := time.Now()
	call := func(c *client.Client, caller int) error {
		start := time.Since(origin)
		ts, err := c.GetTimestamp(ctx)
		if err != nil {
			return err
		}
		v.Record(caller, verify.Call{Start: start, End: time.Since(origin), Value: uint64(ts)})
		return nil
	}
	for i, c := range []*client.Client{a, b} {
		if err := call(c, i); err != nil {
			t.Fatal(err)
		}
	}

	// Hold the next batch answered (C1's) after the final check.
	var armed atomic.Bool
	caught, release := make(chan struct{}), make(chan struct{})
	hook := func() {
		if armed.CompareAndSwap(true, false) {
			close(caught)
			<-release
		}
	}
	for _, w := range s.Workers {
		w.Late.Store(&hook)
	}
	released := false
	releaseOnce := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer releaseOnce()
	transmissions := func() uint64 { st := a.Stats(); return st.Requests + st.Retransmits }
	base := transmissions() // C1's first transmission, under T0, is the next
	armed.Store(true)
	c1, cancel1 := context.WithCancel(ctx)
	c1done := make(chan error, 1)
	go func() { _, err := a.GetTimestamp(c1); c1done <- err }()
	select {
	case <-caught:
	case <-time.After(10 * time.Second):
		t.Fatal("C1 was never answered")
	}
	cancel1() // A gives C1 up: T0 is released
	if err := <-c1done; err == nil {
		t.Fatal("C1 returned a value while its answer was held")
	}

	// B, on the other worker, returns a value above v1.
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	bstart := time.Since(origin)
	ts, err := b.GetTimestamp(bctx)
	bcancel()
	if err != nil {
		t.Fatalf("B's call (is B on A's worker?): %v", err)
	}
	v.Record(1, verify.Call{Start: bstart, End: time.Since(origin), Value: uint64(ts)})

	// A's calls start after B's returned.
	var wg sync.WaitGroup
	errs := make(chan error, window)
	for i := range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call(a, 2+i); err != nil {
				errs <- err
			}
		}()
	}
	// Let the held answer go once A has sent under T0 again: its
	// transmission number base+1+NumTags, the tags being handed out in
	// cyclic order. It stays outstanding until the next retransmission
	// round, a retransmit later.
	reuse := base + 1 + spec.NumTags
	for deadline := time.Now().Add(30 * time.Second); transmissions() < reuse; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("A sent %d times, not the %d that reuse T0", transmissions()-base, reuse-base)
		}
	}
	if got := transmissions(); got >= reuse+window {
		t.Fatalf("T0 reused %d transmissions ago: no longer outstanding", got-reuse)
	}
	releaseOnce()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("A's call: %v", err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	if st := s.totals(); st.Drops["late"] == 0 {
		t.Fatalf("the held answer was neither accepted nor dropped as late: %+v", st)
	}
	var dropped uint64
	s.cfg.Device.(verbs.Counters).VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterDropDeadline {
			dropped = v
		}
	})
	if dropped == 0 {
		t.Fatal("the provider dropped no answer for its deadline")
	}
	t.Logf("%d calls; server drops %v; client A %+v", v.Len(), s.totals().Drops, a.Stats())
}

// TestArrivalCheckKeepsAnswers: the client's check that an answer did
// not arrive before its tag's request was sent (spec.Window.AnswerArrived,
// on the soft provider's receive stamps) rejects no answer of its own
// request, whether the client spins between calls, pauses past the
// provider's staleEmpty, or keeps many calls in flight.
func TestArrivalCheckKeepsAnswers(t *testing.T) {
	s := newServer(t, &fakeOracle{})
	_, addr := admintest.Start(t, admin.Config{}, pb(s))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithWindow(32))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 600 {
		if _, err := c.GetTimestamp(ctx); err != nil {
			t.Fatal(err)
		}
		if i%3 == 1 {
			time.Sleep(time.Duration(i%7) * 300 * time.Microsecond)
		}
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := c.GetTimestamp(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := c.Stats(); st.LateAnswers != 0 || st.Answers != 600+16*200 {
		t.Fatalf("answers taken for late ones: %+v", st)
	}
}
