package client

import (
	"testing"
	"time"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

// The transports' tests drive a transport the way the engine does, against
// a mode's server started in-process (herd_test.go, atomics_test.go).

// The fake oracle and soft devices every mode's tests share.
type fakeOracle = claimtest.Oracle

var errBehind = claimtest.ErrBehind

func openSoft(t testing.TB, opts string) verbs.Device { return claimtest.OpenSoft(t, opts) }

// drive runs total requests through tr as the engine does (IDs from a
// free list, at most Free at a time) and returns the values in completion
// order. Every value must be above each value returned before its
// request was sent (the engine's accept). A request that comes back with
// an error is sent again, as the engine does, while the transport is not
// broken (counted in st.retransmits); a broken transport fails the test.
func drive(t testing.TB, tr transport, st *stats, total int, clock func() time.Duration) []uint64 {
	t.Helper()
	capacity := tr.Free() + tr.Outstanding()
	var free []int
	for id := range capacity {
		free = append(free, id)
	}
	ids := make([]int, capacity)
	res := make([]result, 64)
	floor := make([]uint64, capacity) // largest value returned before request id was sent
	var maxRet uint64
	var out []uint64
	sent := 0
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < total {
		if time.Now().After(deadline) || tr.Broken() {
			t.Fatalf("%d of %d answered before the deadline (broken %v)", len(out), total, tr.Broken())
		}
		now := clock()
		if want := min(tr.Free(), total-sent, len(free)); want > 0 {
			copy(ids, free[len(free)-want:])
			n, err := tr.Send(now, ids[:want])
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[:n] {
				floor[id] = maxRet
			}
			// Send took a prefix of ids (copies of free's last want
			// entries): the rest stay free.
			free = append(free[:len(free)-want], ids[n:want]...)
			sent += n
		}
		n := tr.Poll(now, res)
		for _, x := range res[:n] {
			if x.Err != nil {
				st.retransmits.Add(1)
				free = append(free, x.ID)
				sent--
				continue
			}
			if x.Value <= floor[x.ID] {
				t.Fatalf("request %d got %d, not above %d returned before it was sent", x.ID, x.Value, floor[x.ID])
			}
			maxRet = max(maxRet, x.Value)
			out = append(out, x.Value)
			free = append(free, x.ID)
		}
		if k := tr.Expire(now); k > 0 {
			st.retransmits.Add(uint64(k))
		}
		if f, ok := tr.(flusher); ok {
			f.Flush() // the end of the engine's step
		}
	}
	return out
}

func checkUnique(t testing.TB, vs []uint64) {
	t.Helper()
	seen := make(map[uint64]bool, len(vs))
	for _, v := range vs {
		if seen[v] {
			t.Fatalf("value %d handed out twice", v)
		}
		seen[v] = true
	}
}

// checkServiceTime checks that a server sampled its batches' service
// time as internal/worker does for every mode: one batch in
// wk.SampleEvery per worker, each sample a time within spec.MaxResidence.
func checkServiceTime(t testing.TB, st dataplane.Stats) {
	t.Helper()
	h := st.ServiceTime
	if want := st.Batches/wk.SampleEvery - uint64(len(st.Workers)); int64(want) > 0 && h.Count < want {
		t.Errorf("%d service times sampled in %d batches of %d workers, want at least %d", h.Count, st.Batches, len(st.Workers), want)
	}
	if h.Count > st.Batches/wk.SampleEvery+uint64(len(st.Workers)) || h.Sum > float64(h.Count)*spec.MaxResidence.Seconds() {
		t.Errorf("service time %d samples, sum %gs, for %d batches", h.Count, h.Sum, st.Batches)
	}
}
