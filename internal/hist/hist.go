// Package hist is a lock-free histogram with fixed bucket bounds, for
// counting on hot paths without importing Prometheus: Observe is a few
// comparisons and two atomic adds, allocates nothing, and may run on any
// number of goroutines; Snapshot reads it at scrape time. The client
// library (latency, batch sizes) and the server's workers (service time)
// use it, and the metrics packages turn snapshots into Prometheus
// histograms.
package hist

import (
	"math"
	"slices"
	"sync/atomic"
)

// Histogram counts observations of uint64 values (nanoseconds, sizes)
// into buckets with fixed inclusive upper bounds; values above the last
// bound go to an overflow bucket.
type Histogram struct {
	bounds []uint64
	counts []atomic.Uint64 // len(bounds)+1
	sum    atomic.Uint64
}

// New returns a histogram with upper bounds bounds (increasing).
func New(bounds []uint64) *Histogram {
	b := slices.Clone(bounds)
	slices.Sort(b)
	return &Histogram{bounds: b, counts: make([]atomic.Uint64, len(b)+1)}
}

// Exponential returns n bounds start, start*factor, ... (rounded).
func Exponential(start uint64, factor float64, n int) []uint64 {
	out := make([]uint64, 0, n)
	v := float64(start)
	for range n {
		out = append(out, uint64(math.Round(v)))
		v *= factor
	}
	return out
}

// Observe counts v.
func (h *Histogram) Observe(v uint64) {
	// Binary search over a small slice: no allocation, no closure.
	lo, hi := 0, len(h.bounds)
	for lo < hi {
		m := (lo + hi) / 2
		if v <= h.bounds[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	h.counts[lo].Add(1)
	h.sum.Add(v)
}

// Snapshot is a histogram read at one moment, with its bounds and sum
// multiplied by a scale (1e-9 turns nanoseconds into seconds).
type Snapshot struct {
	Bounds []float64 // upper bounds, increasing
	Counts []uint64  // per bucket, NOT cumulative; len(Bounds)+1, the last one above every bound
	Count  uint64
	Sum    float64
}

// Snapshot reads h, scaling bounds and sum by scale. Concurrent Observes
// may be half counted (in Count but not yet in Sum, or the reverse).
func (h *Histogram) Snapshot(scale float64) Snapshot {
	s := Snapshot{Bounds: make([]float64, len(h.bounds)), Counts: make([]uint64, len(h.counts))}
	for i, b := range h.bounds {
		s.Bounds[i] = float64(b) * scale
	}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = float64(h.sum.Load()) * scale
	return s
}

// Add adds o's counts to s: snapshots of histograms with the same bounds
// (an empty s takes o's bounds).
func (s *Snapshot) Add(o Snapshot) {
	if len(s.Bounds) == 0 {
		s.Bounds, s.Counts = slices.Clone(o.Bounds), make([]uint64, len(o.Counts))
	}
	for i := range min(len(s.Counts), len(o.Counts)) {
		s.Counts[i] += o.Counts[i]
	}
	s.Count += o.Count
	s.Sum += o.Sum
}

// Cumulative is s's buckets in Prometheus's form: for each bound, the
// count of observations at or below it.
func (s Snapshot) Cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(s.Bounds))
	var acc uint64
	for i, b := range s.Bounds {
		acc += s.Counts[i]
		m[b] = acc
	}
	return m
}

// Quantile estimates the q-quantile (0..1) as the upper bound of the
// bucket it falls in (+Inf above the last bound; 0 when empty).
func (s Snapshot) Quantile(q float64) float64 {
	if s.Count == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(s.Count))), 1)
	var acc uint64
	for i, c := range s.Counts[:len(s.Bounds)] {
		if acc += c; acc >= rank {
			return s.Bounds[i]
		}
	}
	return math.Inf(1)
}
