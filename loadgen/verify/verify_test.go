package verify

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// naive is the reference: it compares every pair of calls.
func naive(clients [][]Call) (dups, regs, rts int) {
	type ent struct {
		Call
		client int
	}
	var all []ent
	for ci, cs := range clients {
		for _, c := range cs {
			all = append(all, ent{c, ci})
		}
	}
	count := map[uint64]int{}
	for _, a := range all {
		count[a.Value]++
	}
	for _, k := range count {
		dups += k - 1
	}
	for _, b := range all {
		reg, rt := false, false
		for _, a := range all {
			if a.End < b.Start && a.Value >= b.Value {
				if a.client == b.client {
					reg = true
				} else {
					rt = true
				}
			}
		}
		if reg {
			regs++
		}
		if rt {
			rts++
		}
	}
	return
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name         string
		clients      [][]Call
		dup, reg, rt int
	}{
		{"empty", nil, 0, 0, 0},
		{"clean serial", [][]Call{{{0, 1, 10}, {2, 3, 11}, {4, 5, 12}}}, 0, 0, 0},
		{"clean concurrent any order", [][]Call{{{0, 10, 20}, {1, 11, 19}}, {{2, 12, 18}}}, 0, 0, 0},
		{"touching intervals are concurrent", [][]Call{{{0, 5, 10}}, {{5, 9, 9}}}, 0, 0, 0},
		{"duplicate across clients", [][]Call{{{0, 10, 7}}, {{1, 11, 7}}}, 1, 0, 0},
		{"duplicate within a client, concurrent", [][]Call{{{0, 10, 7}, {1, 11, 7}}}, 1, 0, 0},
		{"client regression", [][]Call{{{0, 1, 10}, {2, 3, 9}}, {{0, 3, 100}}}, 0, 1, 0},
		{"real-time across clients", [][]Call{{{0, 1, 10}}, {{2, 3, 9}}}, 0, 0, 1},
		{"real-time equal value is dup and rt", [][]Call{{{0, 1, 10}}, {{2, 3, 10}}}, 1, 0, 1},
		{"same client best, other client second", [][]Call{
			{{0, 1, 50}, {10, 11, 60}},
			{{0, 2, 40}},
			{{5, 6, 45}}, // after client 1's 40 (fine) but client 0's 50 returned first: rt
		}, 0, 0, 1},
		{"own larger value does not count as real-time", [][]Call{
			{{0, 1, 50}, {5, 6, 55}},
			{{0, 2, 40}},
		}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.clients, 3)
			if r.Duplicates != tc.dup || r.Regressions != tc.reg || r.RealTime != tc.rt {
				t.Fatalf("got dup=%d reg=%d rt=%d, want %d %d %d; %v", r.Duplicates, r.Regressions, r.RealTime,
					tc.dup, tc.reg, tc.rt, r.Examples)
			}
			if d, g, x := naive(tc.clients); d != tc.dup || g != tc.reg || x != tc.rt {
				t.Fatalf("naive disagrees with the table: %d %d %d", d, g, x)
			}
			if (r.Err() == nil) != r.OK() {
				t.Fatal("Err and OK disagree")
			}
		})
	}
}

func TestExamplesName(t *testing.T) {
	r := Check([][]Call{{{0, 1, 10}}, {{2, 3, 9}}}, 1)
	if len(r.Examples) != 1 || r.Examples[0].Kind != RealTime || r.Examples[0].AClient != 0 || r.Examples[0].BClient != 1 {
		t.Fatalf("examples %+v", r.Examples)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "real-time") {
		t.Fatalf("err %v", err)
	}
}

func TestExamplesBounded(t *testing.T) {
	var cs []Call
	for i := range 100 {
		cs = append(cs, Call{time.Duration(i), 1000, 5}) // all overlapping: only duplicates
	}
	r := Check([][]Call{cs}, 2)
	if r.Duplicates != 99 || len(r.Examples) != 2 {
		t.Fatalf("dups %d examples %d", r.Duplicates, len(r.Examples))
	}
}

// TestDifferential compares Check with the naive checker on random small
// histories: clean ones (a real linearizable counter) with faults planted.
func TestDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		nc := 1 + rng.IntN(4)
		clients := make([][]Call, nc)
		var counter uint64 = 100
		for range 1 + rng.IntN(30) {
			c := rng.IntN(nc)
			start := time.Duration(rng.IntN(60))
			end := start + time.Duration(rng.IntN(15))
			// a value between the linearization points is always valid;
			// then perturb some
			counter += uint64(1 + rng.IntN(3))
			v := counter
			switch rng.IntN(8) {
			case 0:
				v = 100 + uint64(rng.IntN(40))
			case 1:
				v = counter - uint64(rng.IntN(5))
			}
			clients[c] = append(clients[c], Call{start, end, v})
		}
		r := Check(clients, 1)
		chunked := make([][][]Call, nc)
		for i, cs := range clients {
			k := 0
			if len(cs) > 0 {
				k = rng.IntN(len(cs) + 1)
			}
			chunked[i] = [][]Call{cs[:k], cs[k:]}
		}
		if rc := CheckChunked(chunked, 1); rc.Violations() != r.Violations() || rc.Calls != r.Calls {
			t.Fatalf("iter %d: chunked %+v, whole %+v", iter, rc, r)
		}
		d, g, x := naive(clients)
		if r.Duplicates != d || r.Regressions != g || r.RealTime != x {
			t.Fatalf("iter %d: Check dup=%d reg=%d rt=%d, naive %d %d %d\n%v", iter,
				r.Duplicates, r.Regressions, r.RealTime, d, g, x, clients)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	const perClient = 1 << 16
	clients := make([][]Call, 4)
	var v uint64
	for i := range perClient {
		for c := range clients {
			v++
			clients[c] = append(clients[c], Call{time.Duration(i * 10), time.Duration(i*10 + 15), v})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := Check(clients, 1); !r.OK() {
			b.Fatal(r.Err())
		}
	}
	b.ReportMetric(float64(b.N*perClient*len(clients))/b.Elapsed().Seconds()/1e6, "Mcalls/s")
}
