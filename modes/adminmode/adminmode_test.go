package adminmode

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// fakeMode records what it was asked and grants g.
type fakeMode struct {
	admitted []handshake.Admission
	replaced []handshake.SessionRef
	released []handshake.SessionRef
	g        handshake.Grant
	st       dataplane.Stats
}

func (m *fakeMode) Admit(ctx context.Context, a handshake.Admission, r handshake.SessionRef) (handshake.Grant, error) {
	m.admitted, m.replaced = append(m.admitted, a), append(m.replaced, r)
	return m.g, nil
}

func (m *fakeMode) Release(ctx context.Context, r handshake.SessionRef) error {
	m.released = append(m.released, r)
	return nil
}

func (m *fakeMode) Stats() dataplane.Stats { return m.st }
func (m *fakeMode) Stop() (uint64, error)  { return 0, nil }
func (m *fakeMode) Close() error           { return nil }
func (c current) Current() uint64          { return uint64(c) }

type current uint64

func addr(port uint16) verbs.Address { return verbs.Address{GID: verbs.GID{15: 1}, Port: port} }

func pb(a verbs.Address, q verbs.QPN) *adminpb.Endpoint {
	b, _ := a.MarshalBinary()
	return &adminpb.Endpoint{Address: b, Qpn: uint32(q)}
}

func TestConnect(t *testing.T) {
	m := &fakeMode{g: handshake.Grant{Session: 7, Epoch: 9, Window: 16, QKey: 0x11, AnswerQKey: 0x22,
		ServerQPs: []handshake.Endpoint{{Addr: addr(1), QPN: 5}}, Assignment: []uint32{0},
		ConnPSNs: []verbs.PSN{3}, RemoteAddr: []uint64{0x1000}, RKey: []uint32{4}}}
	b := &Backend{Mode: m, Name: spec.ModeHERD, Metrics: "herd", Format: spec.FormatCounter, Epoch: 9, Oracle: current(42)}
	ctx := context.Background()
	ok := &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{pb(addr(2), 8)}, ConnQps: []*adminpb.Endpoint{pb(addr(2), 9)},
		Window: 16, ClientName: "c", ProtocolVersion: spec.ProtocolVersion}
	for name, c := range map[string]struct {
		req  *adminpb.ConnectRequest
		want error
	}{
		"other mode":   {&adminpb.ConnectRequest{Mode: spec.ModeSpecS0, ProtocolVersion: spec.ProtocolVersion}, dataplane.ErrFailedPrecondition},
		"old protocol": {&adminpb.ConnectRequest{ProtocolVersion: spec.ProtocolVersion - 1}, dataplane.ErrFailedPrecondition},
		"bad address":  {&adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{{Address: []byte{1}}}, ProtocolVersion: spec.ProtocolVersion}, dataplane.ErrInvalidArgument},
		"wide QPN": {&adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{pb(addr(1), 1)}, ConnQps: []*adminpb.Endpoint{pb(addr(1), 1<<24)},
			ProtocolVersion: spec.ProtocolVersion}, dataplane.ErrInvalidArgument},
	} {
		if _, err := b.Connect(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if len(m.admitted) != 0 {
		t.Fatalf("refused requests reached the mode: %+v", m.admitted)
	}
	resp, err := b.Replace(ctx, &adminpb.DisconnectRequest{SessionId: 3, Epoch: 9}, ok)
	if err != nil {
		t.Fatal(err)
	}
	a := m.admitted[0]
	if a.Name != "c" || a.Window != 16 || a.QPs[0] != (handshake.Endpoint{Addr: addr(2), QPN: 8}) ||
		a.ConnQPs[0] != (handshake.Endpoint{Addr: addr(2), QPN: 9}) || m.replaced[0] != (handshake.SessionRef{ID: 3, Epoch: 9}) {
		t.Fatalf("admission %+v replacing %+v", a, m.replaced[0])
	}
	if resp.GetSessionId() != 7 || resp.GetMode() != spec.ModeHERD || resp.GetFormat() != "counter" || resp.GetQkey() != 0x11 ||
		resp.GetAnswerQkey() != 0x22 || resp.GetHigh() != 42 || resp.GetEpoch() != 9 || resp.GetWindow() != 16 ||
		resp.GetProtocolVersion() != spec.ProtocolVersion || len(resp.GetServerQps()) != 1 || resp.GetServerQps()[0].GetQpn() != 5 ||
		resp.GetConnPsns()[0] != 3 || resp.GetRemoteAddr()[0] != 0x1000 || resp.GetRkey()[0] != 4 {
		t.Fatalf("response %v", resp)
	}
	// The mode checks the epoch (dataplane.Mode): adminmode passes the
	// session named, epoch and all, through.
	if _, err := b.Replace(ctx, &adminpb.DisconnectRequest{SessionId: 3, Epoch: 8}, ok); err != nil || m.replaced[1] != (handshake.SessionRef{ID: 3, Epoch: 8}) {
		t.Fatalf("replacing another epoch's session: %v, mode asked to replace %+v", err, m.replaced[1])
	}
	if err := b.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: 3, Epoch: 8}); err != nil || m.released[0] != (handshake.SessionRef{ID: 3, Epoch: 8}) {
		t.Fatalf("Disconnect = %v, released %v", err, m.released)
	}
}

func TestStatusAndMetrics(t *testing.T) {
	m := &fakeMode{st: dataplane.Stats{Sessions: 2, Served: 10, Batches: 4, Stalls: 1, Drops: 3, Current: 5,
		Workers:  []dataplane.WorkerStats{{ID: 0, Core: -1, Batches: 4, Requests: 10, Drops: 3}},
		Counters: []dataplane.Counter{{Name: "drops_total", Reason: "late", Value: 3}, {Name: "level", Gauge: true, Value: 2}}}}
	b := &Backend{Mode: m, Name: spec.ModeSpecS0, Metrics: "headeronly", Format: spec.FormatHybrid, Epoch: 9, Version: "v", Oracle: current(42)}
	st, err := b.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.GetMode() != spec.ModeSpecS0 || st.GetFormat() != "hybrid" || st.GetCurrent() != 42 || st.GetSessions() != 2 ||
		st.GetServed() != 10 || st.GetDrops() != 3 || st.GetPersistStalls() != 1 || st.GetEpoch() != 9 || st.GetVersion() != "v" ||
		len(st.GetWorkers()) != 1 || st.GetWorkers()[0].GetAvgBatch() != 2.5 {
		t.Fatalf("status %v", st)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{b})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, pm := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range pm.GetLabel() {
				name += "/" + l.GetValue()
			}
			if pm.GetGauge() != nil {
				got[name+"(gauge)"] = pm.GetGauge().GetValue()
			} else {
				got[name] = pm.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"seqd_headeronly_served_total": 10, "seqd_headeronly_batches_total": 4,
		"seqd_headeronly_persist_stalls_total": 1, "seqd_headeronly_drops_total/late": 3, "seqd_headeronly_level(gauge)": 2}
	if len(got) != len(want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// collector is b as a registered (unchecked) collector.
type collector struct{ b *Backend }

func (collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) { c.b.Collect(ch) }

// walkingMode is a mode whose Stats walks every session (headeronly's
// sessions_overrun): Status must take its Summary instead.
type walkingMode struct {
	fakeMode
	walks int
}

func (m *walkingMode) Stats() dataplane.Stats {
	m.walks++
	st := m.st
	st.Counters = append(st.Counters, dataplane.Counter{Name: "sessions_overrun", Gauge: true, Value: 1})
	return st
}

func (m *walkingMode) Summary() dataplane.Stats { return m.st }

// Clients call Status before every Connect, a thousand at once after a
// failover: it reports the mode's Summary, not the Stats whose Counters
// walk the session table under the lock Connects take.
func TestStatusTakesSummary(t *testing.T) {
	m := &walkingMode{fakeMode: fakeMode{st: dataplane.Stats{Sessions: 1000, Served: 5}}}
	b := &Backend{Mode: m, Name: spec.ModeSpecS0, Metrics: "headeronly", Format: spec.FormatHybrid, Epoch: 3}
	st, err := b.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSessions() != 1000 || st.GetServed() != 5 {
		t.Errorf("Status: sessions %d served %d, want 1000 and 5", st.GetSessions(), st.GetServed())
	}
	if m.walks != 0 {
		t.Errorf("Status called the mode's Stats %d times (a walk of every session each); want its Summary", m.walks)
	}
}
