package clientmetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/client/clientmetrics"
)

type fixed client.Stats

func (f *fixed) Stats() client.Stats { return client.Stats(*f) }

func TestCollector(t *testing.T) {
	s := &fixed{Requests: 10, Answers: 8, Retransmits: 3, Reconnects: 1, Doorbells: 4, SpecMisses: 2,
		StaleAnswers: 5, Malformed: 6, Forged: 7, BadQKey: 9, Timeouts: 2, Regressions: 0, Completed: 7, Failed: 3,
		Latency: client.Histogram{Bounds: []float64{0.001, 0.01}, Counts: []uint64{4, 2, 1}, Count: 7, Sum: 0.05}}
	c := clientmetrics.New(s, prometheus.Labels{"client": "t"})
	want := `
# HELP seqd_client_call_errors_total Calls that failed, by kind: timeout (the deadline passed), regression (an answer not above a value returned before), other (the client closed, or a configuration error).
# TYPE seqd_client_call_errors_total counter
seqd_client_call_errors_total{client="t",kind="other"} 1
seqd_client_call_errors_total{client="t",kind="regression"} 0
seqd_client_call_errors_total{client="t",kind="timeout"} 2
# HELP seqd_client_calls_total Timestamp requests submitted (GetTimestamp, each value of GetTimestamps, Submit).
# TYPE seqd_client_calls_total counter
seqd_client_calls_total{client="t"} 10
# HELP seqd_client_dropped_answers_total Answers dropped by reason: stale (its request was resent or gone), malformed, forged (not from the server's response QPs), bad_qkey (without the session's answer Q_Key).
# TYPE seqd_client_dropped_answers_total counter
seqd_client_dropped_answers_total{client="t",reason="bad_qkey"} 9
seqd_client_dropped_answers_total{client="t",reason="forged"} 7
seqd_client_dropped_answers_total{client="t",reason="malformed"} 6
seqd_client_dropped_answers_total{client="t",reason="stale"} 5
# HELP seqd_client_calls_in_flight Calls submitted and not yet completed.
# TYPE seqd_client_calls_in_flight gauge
seqd_client_calls_in_flight{client="t"} 3
# HELP seqd_client_call_duration_seconds Time from a call's submission to its completion, with a value or an error.
# TYPE seqd_client_call_duration_seconds histogram
seqd_client_call_duration_seconds_bucket{client="t",le="0.001"} 4
seqd_client_call_duration_seconds_bucket{client="t",le="0.01"} 6
seqd_client_call_duration_seconds_bucket{client="t",le="+Inf"} 7
seqd_client_call_duration_seconds_sum{client="t"} 0.05
seqd_client_call_duration_seconds_count{client="t"} 7
# HELP seqd_client_retransmits_total Requests resent under a fresh tag after their answer did not come in time.
# TYPE seqd_client_retransmits_total counter
seqd_client_retransmits_total{client="t"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "seqd_client_calls_total", "seqd_client_call_errors_total",
		"seqd_client_dropped_answers_total", "seqd_client_retransmits_total", "seqd_client_calls_in_flight",
		"seqd_client_call_duration_seconds"); err != nil {
		t.Fatal(err)
	}
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) != 0 {
		t.Fatalf("lint: %v %v", err, probs)
	}
	// Several clients in one registry: told apart by their labels.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c, clientmetrics.New(s, prometheus.Labels{"client": "u"}))
	if n, err := testutil.GatherAndCount(reg, "seqd_client_calls_total"); err != nil || n != 2 {
		t.Fatalf("two clients: %d series, %v", n, err)
	}
}
