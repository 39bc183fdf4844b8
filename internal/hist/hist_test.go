package hist

import (
	"math"
	"sync"
	"testing"
)

func TestObserve(t *testing.T) {
	h := New([]uint64{10, 100, 1000})
	for _, v := range []uint64{0, 10, 11, 100, 500, 1000, 1001, 1 << 40} {
		h.Observe(v)
	}
	s := h.Snapshot(0.5)
	if want := []uint64{2, 2, 2, 2}; !equal(s.Counts, want) {
		t.Fatalf("counts %v, want %v", s.Counts, want)
	}
	if s.Count != 8 || s.Bounds[2] != 500 {
		t.Fatalf("%+v", s)
	}
	if want := float64(0+10+11+100+500+1000+1001+1<<40) * 0.5; s.Sum != want {
		t.Fatalf("sum %v, want %v", s.Sum, want)
	}
	c := s.Cumulative()
	if c[5] != 2 || c[50] != 4 || c[500] != 6 {
		t.Fatalf("cumulative %v", c)
	}
	if q := s.Quantile(0.5); q != 50 {
		t.Fatalf("p50 %v", q)
	}
	if q := s.Quantile(0.99); !math.IsInf(q, 1) {
		t.Fatalf("p99 %v", q)
	}
	if (Snapshot{}).Quantile(0.5) != 0 {
		t.Fatal("empty quantile")
	}
}

func TestConcurrent(t *testing.T) {
	h := New(Exponential(1, 2, 20))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10000 {
				h.Observe(uint64(g*10000 + i))
			}
		}()
	}
	wg.Wait()
	if s := h.Snapshot(1); s.Count != 80000 {
		t.Fatalf("count %d", s.Count)
	}
}

func TestExponential(t *testing.T) {
	if got := Exponential(1000, 2, 4); !equal(got, []uint64{1000, 2000, 4000, 8000}) {
		t.Fatal(got)
	}
}

func BenchmarkObserve(b *testing.B) {
	h := New(Exponential(1000, 2, 20))
	b.ReportAllocs()
	for i := range b.N {
		h.Observe(uint64(i))
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAdd(t *testing.T) {
	a, b := New([]uint64{10, 100}), New([]uint64{10, 100})
	a.Observe(5)
	b.Observe(50)
	b.Observe(500)
	var s Snapshot
	s.Add(a.Snapshot(1))
	s.Add(b.Snapshot(1))
	if !equal(s.Counts, []uint64{1, 1, 1}) || s.Count != 3 || s.Sum != 555 || len(s.Bounds) != 2 {
		t.Fatalf("%+v", s)
	}
}
