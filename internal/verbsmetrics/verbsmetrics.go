// Package verbsmetrics exports a verbs device's counters (verbs.Counters)
// as Prometheus families that each measure one thing, as Prometheus's
// naming guide asks: packets, system calls, drops by reason, RC protocol
// events and injected faults. A counter no family knows goes to
// seqd_verbs_other_events_total{counter}, so a provider's new counter is
// exported before it is classified.
package verbsmetrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/verbs"
)

var (
	packetsDesc   = prometheus.NewDesc("seqd_verbs_packets_total", "Packets the verbs provider received (rx) and sent (tx).", []string{"direction"}, nil)
	syscallsDesc  = prometheus.NewDesc("seqd_verbs_syscalls_total", "System calls the verbs provider made to receive (rx) and send (tx) batches of packets.", []string{"direction"}, nil)
	dropsDesc     = prometheus.NewDesc("seqd_verbs_drops_total", "Packets the verbs provider dropped on receipt, by reason (no_recv: no RECV posted; bad_qkey, bad_pkey, bad_icrc, unknown_qpn, malformed, bad_opcode, rkey, psn, length; cq_overrun: a completion found its CQ full).", []string{"reason"}, nil)
	datagramsDesc = prometheus.NewDesc("seqd_verbs_datagrams_total", "UDP datagrams the soft provider received (rx) and sent (tx); with GRO/GSO one datagram carries several packets.", []string{"direction"}, nil)
	rcDesc        = prometheus.NewDesc("seqd_verbs_rc_events_total", "Reliable-connection protocol events: retransmits (requester), duplicates (responder), naks (sent).", []string{"event"}, nil)
	faultsDesc    = prometheus.NewDesc("seqd_verbs_injected_faults_total", "Packets affected by fault injection (-provider-opts loss, dup, reorder): dropped, duplicated, reordered.", []string{"fault"}, nil)
	otherDesc     = prometheus.NewDesc("seqd_verbs_other_events_total", "Events counted by the verbs provider that no other seqd_verbs_ family covers.", []string{"counter"}, nil)
)

// classify maps a counter name to its family and label value.
func classify(name string) (*prometheus.Desc, string) {
	switch name {
	case verbs.CounterRxPackets:
		return packetsDesc, "rx"
	case verbs.CounterTxPackets:
		return packetsDesc, "tx"
	case verbs.CounterRxSyscalls:
		return syscallsDesc, "rx"
	case verbs.CounterTxSyscalls:
		return syscallsDesc, "tx"
	case "rx_datagrams": // the soft provider: UDP datagrams (GRO/GSO carry several packets)
		return datagramsDesc, "rx"
	case "tx_datagrams":
		return datagramsDesc, "tx"
	case "cq_overrun": // the soft provider: a completion that found its CQ full
		return dropsDesc, "cq_overrun"
	case verbs.CounterRCRetransmits:
		return rcDesc, "retransmits"
	case verbs.CounterRCDuplicates:
		return rcDesc, "duplicates"
	case verbs.CounterRCNaks:
		return rcDesc, "naks"
	case verbs.CounterInjectedLoss:
		return faultsDesc, "dropped"
	case verbs.CounterInjectedDup:
		return faultsDesc, "duplicated"
	case verbs.CounterInjectedReorder:
		return faultsDesc, "reordered"
	}
	if r, ok := strings.CutPrefix(name, "rx_drop_"); ok {
		return dropsDesc, r
	}
	return otherDesc, name
}

// Collector exports one device's counters at scrape time.
type Collector struct{ c verbs.Counters }

// New returns a Collector of c.
func New(c verbs.Counters) *Collector { return &Collector{c: c} }

var _ prometheus.Collector = (*Collector)(nil)

// Describe implements prometheus.Collector.
func (*Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{packetsDesc, syscallsDesc, datagramsDesc, dropsDesc, rcDesc, faultsDesc, otherDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *Collector) Collect(ch chan<- prometheus.Metric) { Collect(p.c, ch) }

// Collect sends c's counters to ch, for collectors that export a
// device's counters among their own.
func Collect(c verbs.Counters, ch chan<- prometheus.Metric) {
	c.VisitCounters(func(name string, v uint64) {
		d, label := classify(name)
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	})
}
