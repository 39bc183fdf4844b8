package modes

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/atomics"
	"github.com/seqd/seqd/headeronly"
	"github.com/seqd/seqd/herd"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func format(o *oracle.Oracle) spec.Format {
	if o.Format() == oracle.FormatCounter {
		return spec.FormatCounter
	}
	return spec.FormatHybrid
}

// ---- Spec-S0 ----

type specS0 struct{ *headeronly.Server }

func startSpecS0(c *Config, epoch uint64) (DataPath, error) {
	s, err := headeronly.New(headeronly.Config{Device: c.Device, Oracle: c.Oracle, Behind: oracle.ErrBehind,
		Format: format(c.Oracle), Workers: c.Workers, RespQPs: c.RespQPs, Cores: c.Cores, MaxWindow: c.MaxWindow,
		MaxClients: c.MaxClients, Version: c.Version, Logger: c.Logger, Epoch: epoch, QKey: c.QKey})
	if err != nil {
		return nil, err
	}
	return specS0{s}, nil
}

// Stop closes the server: its QPs are destroyed, so late requests are
// dropped by the provider; every value it handed out was claimed.
func (s specS0) Stop() (uint64, error) { return 0, s.Server.Close() }

// ---- endpoints ----

func endpoint(ep *adminpb.Endpoint) (verbs.Address, verbs.QPN, error) {
	var a verbs.Address
	if err := a.UnmarshalBinary(ep.GetAddress()); err != nil {
		return a, 0, err
	}
	return a, verbs.QPN(ep.GetQpn()), nil
}

func pbEndpoint(a verbs.Address, q verbs.QPN) *adminpb.Endpoint {
	b, _ := a.MarshalBinary()
	return &adminpb.Endpoint{Address: b, Qpn: uint32(q)}
}

func mapErr(err error) error {
	switch {
	case errors.Is(err, herd.ErrClosed), errors.Is(err, atomics.ErrClosed), errors.Is(err, atomics.ErrFenced):
		return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	case errors.Is(err, herd.ErrNoRoom):
		return fmt.Errorf("%w: %v", admin.ErrNoCapacity, err)
	case errors.Is(err, herd.ErrArgument), errors.Is(err, atomics.ErrArgument):
		return fmt.Errorf("%w: %v", admin.ErrInvalidArgument, err)
	case errors.Is(err, herd.ErrNoSession), errors.Is(err, atomics.ErrNoSession):
		return fmt.Errorf("%w: %v", admin.ErrUnknownSession, err)
	}
	return err
}

// ---- HERD ----

type herdDP struct {
	s   *herd.Server
	o   *oracle.Oracle
	cfg *Config
}

func startHERD(c *Config, epoch uint64) (DataPath, error) {
	s, err := herd.New(herd.Config{Device: c.Device, Oracle: c.Oracle, Behind: oracle.ErrBehind, Workers: c.Workers,
		RespQPs: c.RespQPs, Cores: c.Cores, MaxWindow: min(c.MaxWindow, spec.HERDMaxWindow), MaxQPs: c.MaxClients,
		Epoch: epoch, Logger: c.Logger, QKey: c.QKey})
	if err != nil {
		return nil, err
	}
	return &herdDP{s: s, o: c.Oracle, cfg: c}, nil
}

// Connect: qps are the client's UD answer QPs, conn_qps its UC write QPs.
func (h *herdDP) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if len(req.GetConnQps()) != len(req.GetQps()) {
		return nil, fmt.Errorf("%w: herd needs one UC write QP (conn_qps) per answer QP", admin.ErrFailedPrecondition)
	}
	qps := make([]herd.ClientQP, len(req.GetQps()))
	for i := range qps {
		a, n, err := endpoint(req.GetQps()[i])
		if err != nil {
			return nil, fmt.Errorf("%w: qps[%d]: %v", admin.ErrInvalidArgument, i, err)
		}
		wa, wn, err := endpoint(req.GetConnQps()[i])
		if err != nil {
			return nil, fmt.Errorf("%w: conn_qps[%d]: %v", admin.ErrInvalidArgument, i, err)
		}
		qps[i] = herd.ClientQP{Write: herd.Endpoint{Addr: wa, QPN: wn}, Recv: herd.Endpoint{Addr: a, QPN: n}}
	}
	g, err := h.s.Admit(req.GetClientName(), qps, int(req.GetWindow()))
	if err != nil {
		return nil, mapErr(err)
	}
	resp := &adminpb.ConnectResponse{SessionId: g.Session, Mode: HERD, Format: format(h.o).String(), Qkey: h.s.QKey(),
		Window: uint32(g.Window), ProtocolVersion: spec.ProtocolVersion, Epoch: g.Epoch, High: h.o.Current(),
		AnswerQkey: g.QKey}
	for _, a := range g.AnswerFrom {
		resp.AnswerQps = append(resp.AnswerQps, pbEndpoint(verbs.Address{GID: a.GID, Port: a.Port}, a.QPN))
	}
	for i, q := range g.QPs {
		resp.ServerConnQps = append(resp.ServerConnQps, pbEndpoint(q.Server.Addr, q.Server.QPN))
		resp.RemoteAddr = append(resp.RemoteAddr, q.Addr)
		resp.Rkey = append(resp.Rkey, q.RKey)
		resp.Assignment = append(resp.Assignment, uint32(i))
	}
	return resp, nil
}

func (h *herdDP) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error {
	if err := admin.CheckEpoch(req, h.s.Epoch()); err != nil {
		return err
	}
	return mapErr(h.s.Release(req.GetSessionId()))
}

func (h *herdDP) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	st := h.s.Stats()
	resp := &adminpb.StatusResponse{Version: h.cfg.Version, Mode: HERD, Format: format(h.o).String(), Epoch: h.s.Epoch(),
		Sessions: uint64(h.s.Sessions()), PersistStalls: st.Stalls, Served: st.Requests, Current: h.o.Current()}
	for _, w := range h.s.Workers() {
		ws := &adminpb.WorkerStatus{Id: uint32(w.ID), Core: int32(w.Core), Batches: w.Batches, Requests: w.Requests,
			Retransmits: w.Duplicates, Drops: w.Drops}
		if w.Batches > 0 {
			ws.AvgBatch = float64(w.Requests) / float64(w.Batches)
		}
		resp.Workers = append(resp.Workers, ws)
		resp.Drops += w.Drops
	}
	providerCounters(h.cfg.Device, resp)
	return resp, nil
}

func (h *herdDP) Stop() (uint64, error) { return 0, h.s.Stop() }
func (h *herdDP) Close() error          { return h.s.Close() }

func (h *herdDP) Collectors() []prometheus.Collector {
	c := func(name, help string, f func(herd.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqd_herd_" + name, Help: help},
			func() float64 { return float64(f(h.s.Stats())) })
	}
	cs := []prometheus.Collector{
		c("served_total", "Requests answered.", func(s herd.Stats) uint64 { return s.Requests }),
		c("batches_total", "Batches answered.", func(s herd.Stats) uint64 { return s.Batches }),
		c("duplicates_total", "WRITEs of a (slot, seq) already answered, or older.", func(s herd.Stats) uint64 { return s.Duplicates }),
		c("malformed_total", "Slots that did not decode.", func(s herd.Stats) uint64 { return s.Malformed }),
		c("persist_stalls_total", "Claims refused because persistence lagged.", func(s herd.Stats) uint64 { return s.Stalls }),
	}
	for _, r := range herd.DropReasons() {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqd_herd_drops_total",
			Help: "Requests not answered, by reason.", ConstLabels: prometheus.Labels{"reason": r}},
			func() float64 { return float64(h.s.Stats().Drops[r]) }))
	}
	return cs
}

func providerCounters(dev verbs.Device, resp *adminpb.StatusResponse) {
	if c, ok := dev.(verbs.Counters); ok {
		resp.ProviderCounters = map[string]uint64{}
		c.VisitCounters(func(name string, v uint64) { resp.ProviderCounters[name] = v })
	}
}

// ---- atomics ----

type atomicsDP struct {
	s   *atomics.Server
	o   *oracle.Oracle
	cfg *Config
}

func startAtomics(ctx context.Context, c *Config, epoch uint64) (DataPath, error) {
	s, err := atomics.New(ctx, atomics.Config{Device: c.Device, Oracle: c.Oracle, Block: c.AtomicsBlock,
		MaxQPs: c.MaxClients * 16, Epoch: epoch, Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	return &atomicsDP{s: s, o: c.Oracle, cfg: c}, nil
}

// Connect: qps are the client's RC QPs.
func (a *atomicsDP) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if len(req.GetConnQps()) != 0 {
		return nil, fmt.Errorf("%w: atomics takes RC QPs in qps, not conn_qps", admin.ErrFailedPrecondition)
	}
	eps := make([]atomics.Endpoint, len(req.GetQps()))
	for i, ep := range req.GetQps() {
		ad, n, err := endpoint(ep)
		if err != nil {
			return nil, fmt.Errorf("%w: qps[%d]: %v", admin.ErrInvalidArgument, i, err)
		}
		eps[i] = atomics.Endpoint{Addr: ad, QPN: n}
	}
	g, err := a.s.Admit(req.GetClientName(), eps)
	if err != nil {
		return nil, mapErr(err)
	}
	resp := &adminpb.ConnectResponse{SessionId: g.Session, Mode: Atomics, Format: format(a.o).String(),
		Window: req.GetWindow(), ProtocolVersion: spec.ProtocolVersion, Epoch: g.Epoch, High: a.s.Next(),
		RemoteAddr: []uint64{g.Addr}, Rkey: []uint32{g.RKey}}
	for _, p := range g.PSNs {
		resp.ConnPsns = append(resp.ConnPsns, uint32(p))
	}
	for i, e := range g.Server {
		resp.ServerConnQps = append(resp.ServerConnQps, pbEndpoint(e.Addr, e.QPN))
		resp.Assignment = append(resp.Assignment, uint32(i))
	}
	return resp, nil
}

func (a *atomicsDP) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error {
	if err := admin.CheckEpoch(req, a.s.Epoch()); err != nil {
		return err
	}
	return mapErr(a.s.Release(req.GetSessionId()))
}

func (a *atomicsDP) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	st := a.s.Stats()
	resp := &adminpb.StatusResponse{Version: a.cfg.Version, Mode: Atomics, Format: format(a.o).String(), Epoch: a.s.Epoch(),
		Sessions: uint64(st.Sessions), Current: st.Next - 1}
	providerCounters(a.cfg.Device, resp)
	return resp, nil
}

func (a *atomicsDP) Stop() (uint64, error) { return a.s.Stop() }
func (a *atomicsDP) Close() error          { return a.s.Close() }

func (a *atomicsDP) Collectors() []prometheus.Collector {
	c := func(name, help string, f func(atomics.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seqd_atomics_" + name, Help: help},
			func() float64 { return float64(f(a.s.Stats())) })
	}
	return []prometheus.Collector{
		c("lease_renewals_total", "Leases claimed from the oracle ahead of the NIC counter.", func(s atomics.Stats) uint64 { return s.Renewals }),
		c("fences_total", "Times every QP was moved to ERR because the counter neared the lease's end.", func(s atomics.Stats) uint64 { return s.Fences }),
	}
}
