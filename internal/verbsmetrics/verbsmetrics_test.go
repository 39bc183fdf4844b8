package verbsmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seqd/seqd/verbs"
)

type counters map[string]uint64

func (c counters) VisitCounters(f func(string, uint64)) {
	for k, v := range c {
		f(k, v)
	}
}

func TestFamilies(t *testing.T) {
	c := New(counters{verbs.CounterRxPackets: 10, verbs.CounterTxPackets: 9, verbs.CounterRxSyscalls: 3,
		verbs.CounterDropBadQKey: 2, verbs.CounterDropNoRecv: 1, verbs.CounterRCNaks: 4,
		verbs.CounterInjectedLoss: 5, "future_counter": 6})
	want := `
# HELP seqd_verbs_packets_total Packets the verbs provider received (rx) and sent (tx).
# TYPE seqd_verbs_packets_total counter
seqd_verbs_packets_total{direction="rx"} 10
seqd_verbs_packets_total{direction="tx"} 9
# HELP seqd_verbs_other_events_total Events counted by the verbs provider that no other seqd_verbs_ family covers.
# TYPE seqd_verbs_other_events_total counter
seqd_verbs_other_events_total{counter="future_counter"} 6
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "seqd_verbs_packets_total", "seqd_verbs_other_events_total"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"seqd_verbs_drops_total": 2, "seqd_verbs_syscalls_total": 1,
		"seqd_verbs_rc_events_total": 1, "seqd_verbs_injected_faults_total": 1} {
		if n := testutil.CollectAndCount(c, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) != 0 {
		t.Fatalf("lint: %v %v", err, probs)
	}
	// Every counter verbs names lands in a family of its own.
	for _, name := range []string{verbs.CounterRxPackets, verbs.CounterTxPackets, verbs.CounterRxSyscalls, verbs.CounterTxSyscalls,
		verbs.CounterDropNoRecv, verbs.CounterDropBadQKey, verbs.CounterDropBadPKey, verbs.CounterDropBadICRC,
		verbs.CounterDropUnknownQPN, verbs.CounterDropMalformed, verbs.CounterDropBadOpcode, verbs.CounterDropRKey,
		verbs.CounterDropPSN, verbs.CounterDropLength, verbs.CounterRCRetransmits, verbs.CounterRCDuplicates,
		verbs.CounterRCNaks, verbs.CounterInjectedLoss, verbs.CounterInjectedDup, verbs.CounterInjectedReorder} {
		if d, _ := classify(name); d == otherDesc {
			t.Errorf("verbs counter %q is not classified", name)
		}
	}
}
