//go:build linux

package headeronly

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/verbs/verbstest"
)

// TestTwoCrossingsPerBatch: a worker's batch calls into the provider
// twice, one poll of the CQ its requests and its answers' completions
// share and one PostMany that re-posts the receives and posts the
// answers (issue 16, defect 8: four before). Counted at the verbs API
// (verbstest.Counting), which is where the ibv provider makes one cgo call
// per call. Besides, a poll may find only send completions, at most one
// per SignalEvery answers; empty polls (an idle worker's spins) are not
// crossings of a batch.
func TestTwoCrossingsPerBatch(t *testing.T) {
	dev := verbstest.Counting(claimtest.OpenSoft(t, ""))
	s, err := New(Config{Config: wk.Config{Device: dev, Oracle: &fakeOracle{}, Behind: errBehind, Workers: 1,
		Logger: slog.New(slog.DiscardHandler)}, MaxWindow: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var c benchClient
	defer c.Close()
	for range 3 {
		f, err := newBenchFlow(s)
		if err != nil {
			t.Fatal(err)
		}
		c.flows = append(c.flows, f)
	}
	const rounds, per = 40, 24
	before := s.totals()
	polls0, empty0, posts0 := dev.Polls.Load(), dev.EmptyPolls.Load(), dev.Posts.Load()
	w := s.Workers[0]
	var answered int
	for r := range rounds {
		// The server's crossings are counted between rounds, when the
		// client (whose calls the wrapper does not see: its devices are
		// its own) waits for its answers.
		if err := c.Send(per); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for got := 0; got < per; {
			k, err := c.Poll()
			if err != nil {
				t.Fatal(err)
			}
			got += k
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d answers; drops %v", r, got, per, s.totals().Drops)
			}
		}
		answered += per
	}
	// The worker counts a batch after its doorbell: the last batch's
	// answers can arrive before its counts do.
	after := s.totals()
	for deadline := time.Now().Add(5 * time.Second); after.Requests-before.Requests < uint64(answered) && time.Now().Before(deadline); {
		runtime.Gosched()
		after = s.totals()
	}
	// A loaded machine may keep the worker off its core for longer than
	// spec.MaxResidence: such requests are dropped (and their batch still
	// posts its receives), never answered late.
	late := after.Drops["expired"] + after.Drops["late"] - before.Drops["expired"] - before.Drops["late"]
	if got := after.Requests - before.Requests; got+late != rounds*per || got == 0 {
		t.Fatalf("answered %d requests and dropped %d for their age, want %d in all; drops %v", got, late, rounds*per, after.Drops)
	}
	batches := after.Batches - before.Batches
	polls := dev.Polls.Load() - polls0 - (dev.EmptyPolls.Load() - empty0)
	posts := dev.Posts.Load() - posts0
	sendPolls := uint64(answered/w.Resp.SignalEvery() + 1) // polls that found only send completions, at most
	t.Logf("%d batches answered: %d polls with work, %d posts (%.2f crossings per batch)", batches, polls, posts, float64(polls+posts)/float64(batches))
	// Every poll that found requests is a batch, and posts once (its
	// receives, and its answers unless all were dropped).
	if posts < batches || posts > polls {
		t.Errorf("%d posts for %d batches answered and %d polls with work, want one per batch", posts, batches, polls)
	}
	if polls > posts+sendPolls {
		t.Errorf("%d polls with work for %d batches, want at most one each plus %d that found only send completions", polls, posts, sendPolls)
	}
}
