// Package adminmode serves one running dataplane.Mode as an admin
// backend, for every mode alike: it decodes the requests and encodes the
// answers through admin/handshake, the one translation between the admin
// protocol (adminpb) and the Go values every mode speaks.
// Package modes uses it for the mode it runs; a mode's own tests use it
// to reach their server through the protocol.
package adminmode

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/verbsmetrics"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Backend is one running mode as an admin backend (admin.Backend and
// admin.Replacer). Mode errors are dataplane's kinds, which are admin's.
// The mode checks the epoch of every session named (dataplane.Mode): a
// session of another epoch is unknown to it.
type Backend struct {
	Mode dataplane.Mode
	// Name is the mode's name (spec.Mode*): a ConnectRequest for another
	// mode is refused.
	Name string
	// Metrics names the mode's metrics, seqd_<Metrics>_*.
	Metrics string
	Format  spec.Format
	// Epoch is the epoch the mode was started with.
	Epoch   uint64
	Version string
	// Device, when it counts events (verbs.Counters), adds them to Status
	// and the metrics. Oracle, when set, is the value a Status reports
	// at least and a grant's speculation when the mode has none.
	Device verbs.Device
	Oracle interface{ Current() uint64 }
}

// Connect admits a client.
func (b *Backend) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	return b.Replace(ctx, nil, req)
}

// Replace admits req, releasing the session old names (nil: none) in the
// same step.
func (b *Backend) Replace(ctx context.Context, old *adminpb.DisconnectRequest, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	a, err := admission(req, b.Name)
	if err != nil {
		return nil, err
	}
	a.Identities = admin.CallerIdentities(ctx)
	var ref handshake.SessionRef // none: nothing to release
	if old != nil {
		ref = handshake.DecodeSessionRef(old)
	}
	g, err := b.Mode.Admit(ctx, a, ref)
	if err != nil {
		return nil, err
	}
	if g.High == 0 && b.Oracle != nil {
		g.High = b.Oracle.Current()
	}
	g.Mode, g.Format = b.Name, b.Format
	return handshake.EncodeGrant(g), nil
}

// Disconnect releases a session (of the mode's epoch: the mode checks).
func (b *Backend) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error {
	return b.Mode.Release(ctx, handshake.DecodeSessionRef(req))
}

// Status reports the mode: its Summary when it has one (Status leaves
// out the mode's own Counters; see dataplane.Summarizer).
func (b *Backend) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	var st dataplane.Stats
	if s, ok := b.Mode.(dataplane.Summarizer); ok {
		st = s.Summary()
	} else {
		st = b.Mode.Stats()
	}
	resp := &adminpb.StatusResponse{Version: b.Version, Mode: b.Name, Format: b.Format.String(), Epoch: b.Epoch,
		Sessions: uint64(st.Sessions), Served: st.Served, SpecMisses: st.SpecMisses, Drops: st.Drops,
		PersistStalls: st.Stalls, Current: st.Current}
	if b.Oracle != nil {
		resp.Current = max(resp.Current, b.Oracle.Current())
	}
	for _, w := range st.Workers {
		ws := &adminpb.WorkerStatus{Id: uint32(w.ID), Core: int32(w.Core), Batches: w.Batches, Requests: w.Requests,
			SpecMisses: w.SpecMisses, Retransmits: w.Retransmits, Drops: w.Drops}
		if w.Batches > 0 {
			ws.AvgBatch = float64(w.Requests) / float64(w.Batches)
		}
		resp.Workers = append(resp.Workers, ws)
	}
	if c, ok := b.Device.(verbs.Counters); ok {
		resp.ProviderCounters = map[string]uint64{}
		c.VisitCounters(func(name string, v uint64) { resp.ProviderCounters[name] = v })
	}
	return resp, nil
}

// admission decodes req for mode: a request for another mode or an
// older protocol is FailedPrecondition, a malformed one InvalidArgument.
func admission(req *adminpb.ConnectRequest, mode string) (handshake.Admission, error) {
	a, err := handshake.DecodeAdmission(req, mode)
	switch {
	case errors.Is(err, handshake.ErrMismatch):
		return a, fmt.Errorf("%w: %w", dataplane.ErrFailedPrecondition, err)
	case err != nil:
		return a, fmt.Errorf("%w: %w", dataplane.ErrInvalidArgument, err)
	}
	return a, nil
}

// Collect sends the mode's metrics, read from one Stats at scrape time:
// seqd_<Metrics>_served_total, batches_total and persist_stalls_total for
// modes with workers, the mode's own Counters, and the device's event
// counters (seqd_verbs_packets_total, seqd_verbs_drops_total{reason}, ...:
// internal/verbsmetrics), and the service-time histogram
// seqd_service_time_seconds{mode} for modes whose workers answer.
func (b *Backend) Collect(ch chan<- prometheus.Metric) {
	st := b.Mode.Stats()
	name := func(n string) string { return "seqd_" + b.Metrics + "_" + n }
	if len(st.Workers) > 0 {
		for _, c := range []dataplane.Counter{
			{Name: "served_total", Help: "Requests answered.", Value: st.Served},
			{Name: "batches_total", Help: "Batches answered (served_total / batches_total is the mean batch size).", Value: st.Batches},
			{Name: "persist_stalls_total", Help: "Claims refused because persistence lagged; the batch was kept.", Value: st.Stalls},
		} {
			ch <- constMetric(name(c.Name), c)
		}
	}
	for _, c := range st.Counters {
		ch <- constMetric(name(c.Name), c)
	}
	if s := st.ServiceTime; len(s.Bounds) > 0 {
		ch <- prometheus.MustNewConstHistogram(serviceTimeDesc, s.Count, s.Sum, s.Cumulative(), b.Name)
	}
	if c, ok := b.Device.(verbs.Counters); ok {
		verbsmetrics.Collect(c, ch)
	}
}

var serviceTimeDesc = prometheus.NewDesc("seqd_service_time_seconds",
	"Time from a batch's oldest request arriving to its answers' doorbell, in the server, sampled every 16th batch of each worker.",
	[]string{"mode"}, nil)

func constMetric(name string, c dataplane.Counter) prometheus.Metric {
	t := prometheus.CounterValue
	if c.Gauge {
		t = prometheus.GaugeValue
	}
	var labels []string
	var values []string
	if c.Reason != "" {
		labels, values = []string{"reason"}, []string{c.Reason}
	}
	m, err := prometheus.NewConstMetric(prometheus.NewDesc(name, c.Help, labels, nil), t, float64(c.Value), values...)
	if err != nil {
		return prometheus.NewInvalidMetric(prometheus.NewDesc(name, c.Help, nil, nil), err)
	}
	return m
}
