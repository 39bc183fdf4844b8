package worker

import (
	"testing"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

type sweptClient struct {
	slots []bool
	seen  verbs.Time
}

func (c *sweptClient) Window() int       { return len(c.slots) }
func (c *sweptClient) Seen() *verbs.Time { return &c.seen }

// TestSweep: a sweep yields every slot from where the last stopped; a
// client whose slots were all read gets the sweep's start as its arrival
// bound, and one cut short keeps its old bound; nothing allocates.
func TestSweep(t *testing.T) {
	a := &sweptClient{slots: []bool{true, false, true}}
	b := &sweptClient{slots: []bool{true, true}}
	clients := []*sweptClient{a, b}
	var sw Sweep
	take := func(limit int) (got []int) {
		for c, pos := range Slots(&sw, clients) {
			if !c.slots[pos] {
				continue
			}
			if !sw.Fresh(c.seen) {
				t.Fatal("a fresh client refused")
			}
			got = append(got, pos)
			if len(got) == limit {
				break
			}
		}
		return got
	}
	a.seen, b.seen = verbs.Now(), verbs.Now()
	old := a.seen
	if got := take(1); len(got) != 1 || got[0] != 0 || a.seen != old {
		t.Fatalf("first sweep: %v, a's bound moved %v", got, a.seen != old)
	}
	// Cut on a's last slot: a was read whole, the next sweep starts with b.
	if got := take(2); len(got) != 2 || got[0] != 0 || got[1] != 2 || a.seen != sw.Start {
		t.Fatalf("second sweep: %v, a's bound is the sweep's start: %v", got, a.seen == sw.Start)
	}
	if got := take(4); len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 0 || got[3] != 2 || b.seen != sw.Start || a.seen != sw.Start {
		t.Fatalf("third sweep: %v", got)
	}
	if sw.Fresh(sw.Start - verbs.Time(2*spec.MaxResidence)) {
		t.Fatal("a client not swept for 8 ms is fresh")
	}
	if n := testing.AllocsPerRun(100, func() {
		for c, pos := range Slots(&sw, clients) {
			if c.slots[pos] && !sw.Fresh(c.seen) {
				break
			}
		}
	}); n != 0 {
		t.Fatalf("%v allocations per sweep", n)
	}
}
