package headeronly

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqd/seqd/verbs"
)

// Collectors returns the data path's metrics, named seqd_headeronly_*.
// They read the workers' atomics at scrape time: the hot path does no
// metric work, and every label (drop reason) is fixed here, once.
func (s *Server) Collectors() []prometheus.Collector {
	sum := func(f func(*workerStats) uint64) func() float64 {
		return func() float64 {
			var t uint64
			for _, w := range s.workers {
				t += f(&w.stats)
			}
			return float64(t)
		}
	}
	counter := func(name, help string, f func(*workerStats) uint64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqd_headeronly_" + name, Help: help, ConstLabels: labels}, sum(f))
	}
	cs := []prometheus.Collector{
		counter("served_total", "Requests answered.", func(w *workerStats) uint64 { return w.requests.Load() }, nil),
		counter("batches_total", "Batches answered (served_total / batches_total is the mean batch size).", func(w *workerStats) uint64 { return w.batches.Load() }, nil),
		counter("spec_misses_total", "Answers that carried the full value (wrong guess, no guess or guard hold).", func(w *workerStats) uint64 { return w.specMisses.Load() }, nil),
		counter("no_guess_total", "Requests that carried no guess.", func(w *workerStats) uint64 { return w.noGuess.Load() }, nil),
		counter("retransmits_seen_total", "Requests repeating the previous tag of their QP (duplicates).", func(w *workerStats) uint64 { return w.dupTags.Load() }, nil),
		counter("persist_stalls_total", "Claims refused because persistence lagged; the batch was kept.", func(w *workerStats) uint64 { return w.stalls.Load() }, nil),
		counter("guard_holds_total", "Batches answered in full because the aliasing guard held confirmations.", func(w *workerStats) uint64 { return w.guardHolds.Load() }, nil),
	}
	for r := range numDropReasons {
		cs = append(cs, counter("drops_total", "Requests not answered, by reason.", func(w *workerStats) uint64 { return w.drops[r].Load() },
			prometheus.Labels{"reason": r.String()}))
	}
	if c, ok := s.cfg.Device.(verbs.Counters); ok {
		cs = append(cs, &providerCollector{c: c})
	}
	if _, ok := s.OverrunSessions(); ok {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seqd_headeronly_sessions_overrun",
			Help: "Connected sessions one of whose own request QPs dropped a request for want of a posted receive (the client sent beyond its window)."},
			func() float64 { n, _ := s.OverrunSessions(); return float64(n) }))
	}
	return cs
}

// Register registers Collectors with r.
func (s *Server) Register(r prometheus.Registerer) error {
	for _, c := range s.Collectors() {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

var providerDesc = prometheus.NewDesc("seqd_verbs_events_total", "Events counted by the verbs provider.", []string{"counter"}, nil)

// providerCollector exports a device's verbs.Counters at scrape time.
type providerCollector struct{ c verbs.Counters }

func (p *providerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- providerDesc }

func (p *providerCollector) Collect(ch chan<- prometheus.Metric) {
	p.c.VisitCounters(func(name string, v uint64) {
		ch <- prometheus.MustNewConstMetric(providerDesc, prometheus.CounterValue, float64(v), name)
	})
}
