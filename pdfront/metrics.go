package pdfront

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the front end's metrics. The Tso handling histogram and
// the batch-size histogram mirror PD's own
// (pd_server_handle_tso_duration_seconds, pd_client_request_tso_batch_size)
// under seqd_pd_ names.
func (s *Server) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqd_pd_" + name, Help: help},
			func() float64 { return float64(f()) })
	}
	return []prometheus.Collector{
		counter("tso_requests_total", "Tso requests received (each for count timestamps).", s.requests.Load),
		counter("tso_timestamps_total", "Timestamps answered (the sum of the answered requests' counts).", s.timestamps.Load),
		counter("tso_errors_total", "Tso requests answered with an error (seqd unavailable past -timeout, bad count or cluster ID, refused).", s.errs.Load),
		counter("tso_refused_total", "Ranges refused because they were not above every value answered before their request arrived (the floor); always 0 unless seqd regressed.", s.refused.Load),
		counter("tso_streams_total", "Tso streams opened by PD clients.", s.streams.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seqd_pd_tso_floor",
			Help: "The largest value answered (seqd's hybrid format)."}, func() float64 { return float64(s.Floor()) }),
		s.handle, s.batch,
	}
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

func newHistograms() (handle, batch prometheus.Histogram) {
	handle = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seqd_pd_tso_handle_duration_seconds",
		Help:    "Time from a Tso request's arrival to its answer: the reservation from seqd.",
		Buckets: prometheus.ExponentialBuckets(20e-6, 2, 16)})
	batch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seqd_pd_tso_batch_size",
		Help: "Timestamps per Tso request (PD's client merges its callers).", Buckets: prometheus.ExponentialBuckets(1, 2, 14)})
	return handle, batch
}

func (s *Server) observe(start time.Time, count int) {
	s.handle.Observe(time.Since(start).Seconds())
	s.batch.Observe(float64(count))
}
