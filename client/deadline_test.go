package client

import (
	"testing"
	"time"
)

// timedQP is a QP of slots with a timer each, as herd's.
type timedQP struct{ due []timer }

func (q *timedQP) timers() []timer { return q.due }

// timedQPs makes a QP per list of deadlines: a negative one is a slot
// not busy.
func timedQPs(deadlines ...[]time.Duration) []*timedQP {
	var qps []*timedQP
	for _, ds := range deadlines {
		q := &timedQP{due: make([]timer, len(ds))}
		for i, d := range ds {
			q.due[i] = timer{busy: d >= 0, deadline: d}
		}
		qps = append(qps, q)
	}
	return qps
}

func TestNextDeadlineExpire(t *testing.T) {
	if _, ok := nextDeadline(timedQPs([]time.Duration{-1, -1})); ok {
		t.Fatal("a deadline with no slot busy")
	}
	qps := timedQPs([]time.Duration{-1, 30, 10}, []time.Duration{20, -1, 5})
	if d, ok := nextDeadline(qps); !ok || d != 5 {
		t.Fatalf("nextDeadline = %v, %v; want 5, true", d, ok)
	}
	var got [][2]int
	var after []*timedQP
	n := expire(qps, 20, func(qi, s int) {
		got = append(got, [2]int{qi, s})
		qps[qi].due[s].deadline = 100 // renewed
	}, func(q *timedQP) error { after = append(after, q); return nil })
	want := [][2]int{{0, 2}, {1, 0}, {1, 2}}
	if n != len(want) || len(got) != len(want) {
		t.Fatalf("expire retried %d (%v), want %v", n, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("expire retried %v, want %v", got, want)
		}
	}
	if len(after) != 2 || after[0] != qps[0] || after[1] != qps[1] {
		t.Fatalf("after ran for %v", after)
	}
	if d, ok := nextDeadline(qps); !ok || d != 30 {
		t.Fatalf("nextDeadline after expire = %v, %v; want 30, true", d, ok)
	}
}

// BenchmarkNextDeadline scans 4 QPs of 64 slots (half busy) for the
// earliest deadline and expires none; it allocates nothing.
func BenchmarkNextDeadline(b *testing.B) {
	ds := make([][]time.Duration, 4)
	for i := range ds {
		ds[i] = make([]time.Duration, 64)
		for s := range ds[i] {
			ds[i][s] = time.Duration(1000 + i*64 + s)
			if s%2 == 1 {
				ds[i][s] = -1
			}
		}
	}
	qps := timedQPs(ds...)
	var sum time.Duration
	b.ReportAllocs()
	for b.Loop() {
		d, _ := nextDeadline(qps)
		sum += d
		sum += time.Duration(expire(qps, 0, func(qi, s int) { sum++ }, nil))
	}
	if sum == 0 {
		b.Fatal("no deadline")
	}
}
