package verify

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Each of the three ways of checking flags each kind: a history that
// breaks exactly one promise once must be reported as that kind, once.
// Were the check of a kind removed, its case would report nothing.

type kindCase struct {
	name string
	kind Kind
	// clients[i] is client i's calls, in the order made (one at a time).
	clients [][]Call
}

var kindCases = []kindCase{
	{"duplicate across clients", Duplicate, [][]Call{{{0, 10, 7}}, {{1, 11, 7}}}},
	{"regression", Regression, [][]Call{{{0, 1, 10}, {2, 3, 9}}}},
	{"real-time", RealTime, [][]Call{{{0, 1, 10}}, {{2, 3, 9}}}},
}

func want(t *testing.T, r Report, k Kind) {
	t.Helper()
	got := [numKinds]int{r.Duplicates, r.Regressions, r.RealTime, r.Reanswered}
	for kk, n := range got {
		w := 0
		if Kind(kk) == k {
			w = 1
		}
		if n != w {
			t.Fatalf("%v: %d, want %d (report %+v)", Kind(kk), n, w, r)
		}
	}
	if len(r.Examples) != 1 || r.Examples[0].Kind != k {
		t.Fatalf("examples %v, want one %v", r.Examples, k)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), k.String()) {
		t.Fatalf("Err() = %v, want one naming %v", err, k)
	}
}

// TestAnswersFlagsReanswered: a request number answered with one value
// and then, retransmitted, with another is Reanswered, once; the same
// value again, and other request numbers, are not.
func TestAnswersFlagsReanswered(t *testing.T) {
	var a Answers
	for _, x := range []struct {
		slot   int
		rn, v  uint64
		wantOK bool
	}{
		{0, 1, 10, true},
		{0, 1, 10, true}, // a retransmission answered from the slot
		{1, 1, 11, true}, // another slot
		{0, 2, 12, true}, // the next request number
		{0, 1, 13, false},
	} {
		if ok := a.Record(5, x.slot, x.rn, x.v); ok != x.wantOK {
			t.Fatalf("Record(slot %d, rn %d, %d) = %v, want %v", x.slot, x.rn, x.v, ok, x.wantOK)
		}
	}
	want(t, a.Report(), Reanswered)
}

func TestCheckFlagsEachKind(t *testing.T) {
	for _, tc := range kindCases {
		t.Run(tc.name, func(t *testing.T) { want(t, Check(tc.clients, 3), tc.kind) })
	}
}

func TestHistoryFlagsEachKind(t *testing.T) {
	for _, tc := range kindCases {
		t.Run(tc.name, func(t *testing.T) {
			var h History
			for ci, cs := range tc.clients {
				for _, c := range cs {
					h.Record(100+ci, c)
				}
			}
			want(t, h.Check(), tc.kind)
			if ex := h.Check().Examples[0]; ex.BClient < 100 {
				t.Fatalf("example names client %d, not the caller Record was given", ex.BClient)
			}
		})
	}
}

func TestOnlineFlagsEachKind(t *testing.T) {
	c := NewOnline(16)
	if k, bad := c.Check(0, 0, 10); bad {
		t.Fatalf("first value: %v", k)
	}
	// A request of the same client sent after it got 10.
	if k, bad := c.Check(c.Floor(), 10, 10); !bad || k != Regression {
		t.Fatalf("own value again: %v %v, want %v", k, bad, Regression)
	}
	// Another client's request sent after 10 arrived.
	if k, bad := c.Check(c.Floor(), 0, 9); !bad || k != RealTime {
		t.Fatalf("below a value received before the send: %v %v, want %v", k, bad, RealTime)
	}
	if n, _ := c.Duplicates(); n != 0 {
		t.Fatalf("%d duplicates among values that passed, want 0", n)
	}
	// Two requests sent before anything arrived, answered with one value.
	if _, bad := c.Check(0, 0, 7); bad {
		t.Fatal("a value of a concurrent request refused")
	}
	if _, bad := c.Check(0, 0, 7); bad {
		t.Fatal("the duplicate is caught at the end, not online")
	}
	if n, first := c.Duplicates(); n != 1 || first != 7 {
		t.Fatalf("duplicates %d (first %d), want 1 (7)", n, first)
	}
}

func TestOnlineFull(t *testing.T) {
	c := NewOnline(2)
	for v := uint64(1); v <= 4; v++ {
		c.Check(0, 0, v)
	}
	if c.Kept() != 2 || c.Unverified != 2 || c.Floor() != 4 {
		t.Fatalf("kept %d unverified %d floor %d", c.Kept(), c.Unverified, c.Floor())
	}
	c.Reset()
	if c.Kept() != 0 || c.Unverified != 0 || c.Floor() != 4 {
		t.Fatalf("after Reset: kept %d unverified %d floor %d", c.Kept(), c.Unverified, c.Floor())
	}
}

// TestHistoryKnowsCallerOrder is what e2e's Verifier caught and
// CheckChunked (loadgen's check before the merge) did not: a caller's
// second call started in the clock tick its first one ended (readings
// 10 and 10), and got a smaller value. The intervals touch, so the
// readings cannot order the calls; the caller's order can.
func TestHistoryKnowsCallerOrder(t *testing.T) {
	calls := []Call{{0, 10, 5}, {10, 20, 4}}
	var h History
	for _, c := range calls {
		h.Record(7, c)
	}
	r := h.Check()
	if r.Regressions != 1 {
		t.Fatalf("History: %d regressions, want 1: %v", r.Regressions, r.Err())
	}
	t.Logf("History: %v", r.Err())
	// The same calls from a client with calls in flight together: no
	// order between them is known, and none is flagged.
	if r := Check([][]Call{calls}, 3); !r.OK() {
		t.Fatalf("Check: %v", r.Err())
	}
}

// naiveSequential is the reference for History: every pair compared, a
// caller's calls ordered as made.
func naiveSequential(clients [][]Call) (dups, regs, rts int) {
	count := map[uint64]int{}
	for _, cs := range clients {
		for _, c := range cs {
			count[c.Value]++
		}
	}
	for _, k := range count {
		dups += k - 1
	}
	for bi, bs := range clients {
		for j, b := range bs {
			for _, a := range bs[:j] {
				if a.Value >= b.Value {
					regs++
					break
				}
			}
			rt := false
			for ai, as := range clients {
				for _, a := range as {
					if ai != bi && a.End < b.Start && a.Value >= b.Value {
						rt = true
					}
				}
			}
			if rt {
				rts++
			}
		}
	}
	return
}

// TestHistoryDifferential compares History with naiveSequential on random
// histories of sequential callers, touching intervals included, with
// faults planted.
func TestHistoryDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 3000 {
		nc := 1 + rng.IntN(4)
		clients := make([][]Call, nc)
		last := make([]time.Duration, nc)
		var h History
		var counter uint64 = 100
		for range 1 + rng.IntN(30) {
			c := rng.IntN(nc)
			start := last[c] + time.Duration(rng.IntN(4)) // 0: in the tick the last call ended
			end := start + time.Duration(rng.IntN(4))
			last[c] = end
			counter += uint64(1 + rng.IntN(3))
			v := counter
			switch rng.IntN(8) {
			case 0:
				v = 100 + uint64(rng.IntN(40))
			case 1:
				v = counter - uint64(rng.IntN(5))
			}
			clients[c] = append(clients[c], Call{start, end, v})
			h.Record(c, Call{start, end, v})
		}
		r := h.Check()
		d, g, x := naiveSequential(clients)
		if r.Duplicates != d || r.Regressions != g || r.RealTime != x || r.Calls != h.Len() {
			t.Fatalf("iter %d: History dup=%d reg=%d rt=%d, naive %d %d %d\n%v", iter,
				r.Duplicates, r.Regressions, r.RealTime, d, g, x, clients)
		}
	}
}
