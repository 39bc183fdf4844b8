// Package adminmode serves one running dataplane.Mode as an admin
// backend: it is the one translation between the admin protocol
// (adminpb) and the Go values every mode speaks, for every mode alike.
// Package modes uses it for the mode it runs; a mode's own tests use it
// to reach their server through the protocol.
package adminmode

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/verbsmetrics"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Backend is one running mode as an admin backend (admin.Backend and
// admin.Replacer). Mode errors are dataplane's kinds, which are admin's.
// A session of another epoch than Epoch is unknown here: the mode is not
// asked.
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
	a, err := Admission(req, b.Name)
	if err != nil {
		return nil, err
	}
	a.Identities = admin.CallerIdentities(ctx)
	var ref dataplane.SessionRef // none, or not of this epoch: nothing to release
	if old != nil && admin.CheckEpoch(old, b.Epoch) == nil {
		ref = SessionRef(old)
	}
	g, err := b.Mode.Admit(ctx, a, ref)
	if err != nil {
		return nil, err
	}
	if g.High == 0 && b.Oracle != nil {
		g.High = b.Oracle.Current()
	}
	return ConnectResponse(g, b.Name, b.Format), nil
}

// Disconnect releases a session of this epoch.
func (b *Backend) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error {
	if err := admin.CheckEpoch(req, b.Epoch); err != nil {
		return err
	}
	return b.Mode.Release(ctx, SessionRef(req))
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

// Admission checks req (protocol version, mode) and turns it into Go
// values.
func Admission(req *adminpb.ConnectRequest, mode string) (dataplane.Admission, error) {
	var a dataplane.Admission
	if m := req.GetMode(); m != "" && m != mode {
		return a, fmt.Errorf("%w: this server runs %s, not %s", dataplane.ErrFailedPrecondition, mode, m)
	}
	if v := req.GetProtocolVersion(); v < spec.ProtocolVersion {
		return a, fmt.Errorf("%w: protocol version %d, server speaks %d", dataplane.ErrFailedPrecondition, v, spec.ProtocolVersion)
	}
	a.Name, a.Window = req.GetClientName(), int(req.GetWindow())
	var err error
	if a.QPs, err = endpoints(req.GetQps(), "qps"); err != nil {
		return a, err
	}
	if a.ConnQPs, err = endpoints(req.GetConnQps(), "conn_qps"); err != nil {
		return a, err
	}
	return a, nil
}

func endpoints(eps []*adminpb.Endpoint, field string) ([]dataplane.Endpoint, error) {
	if len(eps) == 0 {
		return nil, nil
	}
	out := make([]dataplane.Endpoint, len(eps))
	for i, ep := range eps {
		if err := out[i].Addr.UnmarshalBinary(ep.GetAddress()); err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %v", dataplane.ErrInvalidArgument, field, i, err)
		}
		if ep.GetQpn() > uint32(verbs.MaxQPN) {
			return nil, fmt.Errorf("%w: %s[%d]: QPN %d above 24 bits", dataplane.ErrInvalidArgument, field, i, ep.GetQpn())
		}
		out[i].QPN = verbs.QPN(ep.GetQpn())
	}
	return out, nil
}

// SessionRef names the session req names.
func SessionRef(req *adminpb.DisconnectRequest) dataplane.SessionRef {
	return dataplane.SessionRef{ID: req.GetSessionId(), Epoch: req.GetEpoch()}
}

// ConnectResponse is g as the protocol carries it, for mode in format f.
func ConnectResponse(g dataplane.Grant, mode string, f spec.Format) *adminpb.ConnectResponse {
	resp := &adminpb.ConnectResponse{SessionId: g.Session, Mode: mode, Format: f.String(), Qkey: g.QKey,
		ServerQps: pbEndpoints(g.ServerQPs), Assignment: g.Assignment, Window: uint32(g.Window), High: g.High,
		ProtocolVersion: spec.ProtocolVersion, Epoch: g.Epoch, ServerConnQps: pbEndpoints(g.ServerConnQPs),
		RemoteAddr: g.RemoteAddr, Rkey: g.RKey, AnswerQkey: g.AnswerQKey, AnswerQps: pbEndpoints(g.AnswerQPs)}
	for _, p := range g.ConnPSNs {
		resp.ConnPsns = append(resp.ConnPsns, uint32(p))
	}
	return resp
}

func pbEndpoints(eps []dataplane.Endpoint) []*adminpb.Endpoint {
	if len(eps) == 0 {
		return nil
	}
	out := make([]*adminpb.Endpoint, len(eps))
	for i, e := range eps {
		a, _ := e.Addr.MarshalBinary()
		out[i] = &adminpb.Endpoint{Address: a, Qpn: uint32(e.QPN)}
	}
	return out
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
