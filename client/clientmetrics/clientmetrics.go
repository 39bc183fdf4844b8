// Package clientmetrics exports a seqd client's counters to Prometheus.
// It is a package of its own so that the client library does not import
// Prometheus: an application that wants the metrics registers a
// Collector for each Client,
//
//	reg.MustRegister(clientmetrics.New(c, prometheus.Labels{"client": "orders"}))
//
// and the Collector reads c.Stats() at every scrape: nothing is added to
// the client's hot path.
package clientmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/client"
)

// StatsSource is what a Collector reads: *client.Client.
type StatsSource interface {
	Stats() client.Stats
}

// Collector is a prometheus.Collector over one client's Stats.
type Collector struct {
	src StatsSource

	calls, answers, retransmits, reconnects, doorbells, specMisses,
	dropped, errors, inFlight, latency, batch *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of src's counters; labels (may be nil) are
// added to every metric, to tell several clients of one process apart.
func New(src StatsSource, labels prometheus.Labels) *Collector {
	d := func(name, help string, varLabels ...string) *prometheus.Desc {
		return prometheus.NewDesc("seqd_client_"+name, help, varLabels, labels)
	}
	return &Collector{
		src:         src,
		calls:       d("calls_total", "Timestamp requests submitted (GetTimestamp, each value of GetTimestamps, Submit)."),
		answers:     d("answers_total", "Answers accepted: requests completed with a value."),
		retransmits: d("retransmits_total", "Requests resent under a fresh tag after their answer did not come in time."),
		reconnects:  d("reconnects_total", "Reconnects to the server or to a new HA leader."),
		doorbells:   d("doorbells_total", "Posted chains of requests (one doorbell each)."),
		specMisses:  d("spec_misses_total", "Answers whose speculated high part missed (the server sent the full value)."),
		dropped:     d("dropped_answers_total", "Answers dropped by reason: stale (its request was resent or gone), malformed, forged (not from the server's response QPs), bad_qkey (without the session's answer Q_Key).", "reason"),
		errors:      d("call_errors_total", "Calls that failed, by kind: timeout (the deadline passed), regression (an answer not above a value returned before), other (the client closed, or a configuration error).", "kind"),
		inFlight:    d("calls_in_flight", "Calls submitted and not yet completed."),
		latency:     d("call_duration_seconds", "Time from a call's submission to its completion, with a value or an error."),
		batch:       d("batch_size", "Requests posted per doorbell (one chain)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.answers, c.retransmits, c.reconnects, c.doorbells, c.specMisses, c.dropped,
		c.errors, c.inFlight, c.latency, c.batch} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one Stats read per scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.calls, s.Requests)
	counter(c.answers, s.Answers)
	counter(c.retransmits, s.Retransmits)
	counter(c.reconnects, s.Reconnects)
	counter(c.doorbells, s.Doorbells)
	counter(c.specMisses, s.SpecMisses)
	counter(c.dropped, s.StaleAnswers, "stale")
	counter(c.dropped, s.Malformed, "malformed")
	counter(c.dropped, s.Forged, "forged")
	counter(c.dropped, s.BadQKey, "bad_qkey")
	counter(c.errors, s.Timeouts, "timeout")
	counter(c.errors, s.Regressions, "regression")
	counter(c.errors, s.Failed-min(s.Failed, s.Timeouts+s.Regressions), "other")
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight()))
	histogram(ch, c.latency, s.Latency)
	histogram(ch, c.batch, s.BatchSizes)
}

func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h client.Histogram) {
	if len(h.Bounds) == 0 {
		return
	}
	ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, h.Cumulative())
}
