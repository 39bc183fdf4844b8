package dataplanetest

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/verbs"
)

// testErrorKinds: each malformed or conflicting admission is refused
// with the kind package modes maps to the right admin error.
func testErrorKinds(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()

	none := h.admission(1, 1)
	none.QPs, none.ConnQPs = nil, nil
	_, err := in.Admit(ctx, none, handshake.SessionRef{})
	wantKind(t, "Admit without QPs", err, dataplane.ErrInvalidArgument)

	wide := h.admission(2, 1)
	for i := range wide.QPs {
		wide.QPs[i].QPN = verbs.MaxQPN + 1
	}
	for i := range wide.ConnQPs {
		wide.ConnQPs[i].QPN = verbs.MaxQPN + 1
	}
	_, err = in.Admit(ctx, wide, handshake.SessionRef{})
	wantKind(t, "Admit of a QPN above 24 bits", err, dataplane.ErrInvalidArgument)

	g := in.admit(t, h.admission(3, 1), handshake.SessionRef{})
	_, err = in.Admit(ctx, h.admission(3, 1), handshake.SessionRef{})
	wantKind(t, "Admit of a QP another session holds", err, dataplane.ErrFailedPrecondition)
	in.wantSessions(t, 1, "after the refused admissions")

	wantKind(t, "Release of an unknown session", in.Release(ctx, handshake.SessionRef{ID: g.Session + 1, Epoch: g.Epoch}),
		dataplane.ErrUnknownSession)
}

// testCapacity: admissions beyond the configured bound (MaxClients) are
// refused with ErrNoCapacity, and a release makes room again.
func testCapacity(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	var granted []handshake.Grant
	const most = 100 * maxClients // any bound a mode derives from MaxClients is reached by then
	for i := range most {
		g, err := in.Admit(ctx, h.admission(i, 1), handshake.SessionRef{})
		if err == nil {
			granted = append(granted, g)
			continue
		}
		wantKind(t, "Admit beyond capacity", err, dataplane.ErrNoCapacity)
		if len(granted) == 0 {
			t.Fatalf("the first admission was refused: %v", err)
		}
		if err := in.Release(ctx, ref(granted[0])); err != nil {
			t.Fatalf("Release = %v", err)
		}
		return
	}
	t.Fatalf("%d admissions granted with MaxClients %d: no bound", most, maxClients)
}

// metricName is a Prometheus metric name as the exposition format
// writes it, without colons (reserved for recording rules).
var metricName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// workerCounters are the names package modes/adminmode exports for
// every mode with workers; a mode's own counter of the same name would
// be a second metric of one name.
var workerCounters = []string{"served_total", "batches_total", "persist_stalls_total"}

// testCounters: the mode's own counters (Stats.Counters, exported as
// seqd_<Metrics>_<Name>) have valid names, counters end in _total and
// gauges do not, each (name, reason) appears once, a name has one help
// text and one type, none is one of the names exported for every mode,
// and the set does not change with the mode's state.
func testCounters(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	first := in.Stats()
	type key struct{ name, reason string }
	seen := map[key]bool{}
	help := map[string]string{}
	gauge := map[string]bool{}
	for _, c := range first.Counters {
		full := "seqd_" + h.facts().Metrics + "_" + c.Name
		if !metricName.MatchString(full) || strings.ToLower(c.Name) != c.Name {
			t.Errorf("counter %q: %s is not a lowercase metric name", c.Name, full)
		}
		if strings.HasSuffix(c.Name, "_total") == c.Gauge {
			t.Errorf("counter %q (gauge %v): counters end in _total, gauges do not", c.Name, c.Gauge)
		}
		if c.Help == "" {
			t.Errorf("counter %q has no help text", c.Name)
		}
		if len(first.Workers) > 0 {
			for _, w := range workerCounters {
				if c.Name == w {
					t.Errorf("counter %q is exported for every mode with workers already", c.Name)
				}
			}
		}
		k := key{c.Name, c.Reason}
		if seen[k] {
			t.Errorf("counter %q reason %q appears twice", c.Name, c.Reason)
		}
		seen[k] = true
		if hp, ok := help[c.Name]; ok && (hp != c.Help || gauge[c.Name] != c.Gauge) {
			t.Errorf("counter %q has two help texts or types", c.Name)
		}
		help[c.Name], gauge[c.Name] = c.Help, c.Gauge
		if (c.Reason == "") != (countName(first.Counters, c.Name) == 1) {
			t.Errorf("counter %q: a reason label on one of several series of a name, and only then", c.Name)
		}
	}
	g := in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	in.Release(context.Background(), ref(g))
	in.Stop()
	later := in.Stats()
	if len(later.Counters) != len(first.Counters) {
		t.Fatalf("%d counters at start, %d after a session and Stop: the set must not change", len(first.Counters), len(later.Counters))
	}
	for i, c := range later.Counters {
		if c.Name != first.Counters[i].Name || c.Reason != first.Counters[i].Reason {
			t.Errorf("counter %d is %s{%s} after a session and Stop, %s{%s} at start", i, c.Name, c.Reason,
				first.Counters[i].Name, first.Counters[i].Reason)
		}
	}
}

func countName(cs []dataplane.Counter, name string) int {
	n := 0
	for _, c := range cs {
		if c.Name == name {
			n++
		}
	}
	return n
}
