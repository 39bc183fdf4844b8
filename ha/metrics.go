package ha

import "github.com/prometheus/client_golang/prometheus"

// metrics are a Node's counters, children resolved once.
type metrics struct {
	refused struct {
		notLeader, notIncreasing prometheus.Counter
	}
	saveErrors prometheus.Counter
	// ambiguousResolved: saves whose transaction returned an error but
	// had committed, found by re-reading the mark.
	ambiguousResolved prometheus.Counter
	terms             prometheus.Counter
	termEnds          *prometheus.CounterVec
	gateDenied        prometheus.Counter
	leader            prometheus.Gauge
	// beatErrors: heartbeats (serving-lease renewals) that failed to
	// reach etcd; deposed: leaders this instance deposed for missing
	// their heartbeats.
	beatErrors prometheus.Counter
	deposed    prometheus.Counter
	slowEtcd   prometheus.Counter
	all        []prometheus.Collector
}

// Reasons a term ends (seqd_ha_term_ends_total{type}).
const (
	endDeadline  = "deadline"   // the lease's local deadline passed
	endLeaseGone = "lease_gone" // a keep-alive found the lease gone
	endLost      = "lost"       // a save found the election key gone, or etcd reported it deleted
	endTransfer  = "transfer"   // operator transfer
	endStop      = "stop"       // the node stopped
	endServe     = "serve"      // the serving function returned
	endDeposed   = "deposed"    // a heartbeat found the election key gone
)

func newMetrics() *metrics {
	m := &metrics{}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seqd_ha_save_refused_total",
		Help: "Mark saves etcd refused, by reason: not_leader (the term's election key is gone) or not_increasing.",
	}, []string{"type"})
	m.refused.notLeader = refused.WithLabelValues("not_leader")
	m.refused.notIncreasing = refused.WithLabelValues("not_increasing")
	m.saveErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_save_errors_total",
		Help: "Mark saves that failed to reach etcd.",
	})
	m.ambiguousResolved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_save_ambiguous_committed_total",
		Help: "Mark saves whose etcd transaction returned an error although it had committed; re-reading the mark showed the write under this term, so the save succeeded.",
	})
	m.terms = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_terms_total",
		Help: "Leadership terms this instance began.",
	})
	m.termEnds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seqd_ha_term_ends_total",
		Help: "Leadership terms that ended, by reason.",
	}, []string{"type"})
	for _, r := range []string{endDeadline, endLeaseGone, endLost, endTransfer, endStop, endServe, endDeposed} {
		m.termEnds.WithLabelValues(r)
	}
	m.gateDenied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_gate_denied_total",
		Help: "Claims refused because this instance was not, or might no longer be, the leader.",
	})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "seqd_ha_leader",
		Help: "1 while this instance leads and its lease is valid.",
	})
	m.beatErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_beat_errors_total",
		Help: "Leader heartbeats (serving-lease renewals) that failed to reach etcd.",
	})
	m.deposed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_deposed_total",
		Help: "Leaders this instance deposed because their heartbeat stopped for longer than their serving lease could last.",
	})
	m.slowEtcd = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seqd_ha_takeover_deferred_total",
		Help: "Times this instance found the leader's heartbeat stopped but did not depose it, because etcd did not commit its own write within half the serving lease.",
	})
	m.all = []prometheus.Collector{refused, m.saveErrors, m.ambiguousResolved, m.terms, m.termEnds, m.gateDenied, m.leader, m.beatErrors, m.deposed, m.slowEtcd}
	return m
}

// nopMetrics serves Stores built outside a Node; nobody registers them.
var nopMetrics = *newMetrics()
