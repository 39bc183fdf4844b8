package darpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

func open(t testing.TB) verbs.Device { return claimtest.OpenSoft(t, "") }

func newTestServer(t testing.TB, workers, maxClients int) *Server {
	t.Helper()
	m, err := Start(context.Background(), dataplane.Config{Device: open(t), Oracle: &claimtest.Oracle{}, Workers: workers, MaxClients: maxClients, Epoch: 9})
	if err != nil {
		t.Fatal(err)
	}
	s := m.(*Server)
	t.Cleanup(func() { s.Close() })
	return s
}

// rawConn is a bare RC client QP speaking the wire format by hand, with
// one CQ for sends and receives.
type rawConn struct {
	*verbstest.End
	wcs []verbs.WC
}

func newRaw(t testing.TB, dev verbs.Device) *rawConn {
	t.Helper()
	cq := verbstest.NewCQ(t, dev, 64)
	return &rawConn{End: verbstest.NewEndAttr(t, dev, verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq}), wcs: make([]verbs.WC, 8)}
}

func (r *rawConn) ep() handshake.Endpoint {
	return handshake.Endpoint{Addr: r.QP.Address(), QPN: r.QP.QPN()}
}

func (r *rawConn) attach(t testing.TB, g handshake.Grant, i int) {
	t.Helper()
	if err := verbs.Connect(r.QP, verbs.ConnectAttr{Remote: g.ServerConnQPs[i].Addr, RemoteQPN: g.ServerConnQPs[i].QPN,
		RQPSN: g.ConnPSNs[i], SQPSN: g.ConnPSNs[i]}); err != nil {
		t.Fatal(err)
	}
	var wrs []verbs.RecvWR
	for b := range 8 {
		wrs = append(wrs, verbs.RecvWR{ID: uint64(b), SG: []verbs.SGE{{Addr: r.MR.Addr() + 2048 + uint64(b*64), Length: 64, LKey: r.MR.LKey()}}})
	}
	if _, err := r.QP.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
}

// send sends msg as one SEND from buffer slot.
func (r *rawConn) send(t testing.TB, slot int, msg []byte) {
	t.Helper()
	off := uint64(slot * 64)
	copy(r.MR.Bytes()[off:], msg)
	if _, err := r.QP.PostSend([]verbs.SendWR{{ID: 1000 + uint64(slot), Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SG: []verbs.SGE{{Addr: r.MR.Addr() + off, Length: uint32(len(msg)), LKey: r.MR.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// answer waits for the next answer.
func (r *rawConn) answer(t testing.TB) spec.DaRPCMsg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := r.RecvCQ.Poll(r.wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range r.wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
			if wc.Opcode != verbs.WCRecv {
				continue
			}
			off := 2048 + wc.ID*64
			m, err := spec.DecodeDaRPCAnswer(r.MR.Bytes()[off : off+uint64(wc.ByteLen)])
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatal("no answer")
	return spec.DaRPCMsg{}
}

func counter(st dataplane.Stats, name string) uint64 {
	for _, c := range st.Counters {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestMalformedCalls: calls that do not decode, or ask for more than the
// window, are counted and not answered; the connection still serves the
// next good call, whose answer echoes its call ID.
func TestMalformedCalls(t *testing.T) {
	s := newTestServer(t, 1, 0)
	r := newRaw(t, open(t))
	g, err := s.Admit(context.Background(), handshake.Admission{Name: "raw", Window: 4, QPs: []handshake.Endpoint{r.ep()}}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Window != 4 || len(g.ServerConnQPs) != 1 || len(g.ConnPSNs) != 1 || g.Epoch != 9 {
		t.Fatalf("grant %+v", g)
	}
	r.attach(t, g, 0)
	call := func(id uint64, n int) []byte {
		b := make([]byte, spec.DaRPCCallLen)
		b[0], b[1], b[2], b[3] = spec.DaRPCVersion, byte(spec.DaRPCCall), byte(n>>8), byte(n)
		for i := range 8 {
			b[4+i] = byte(id >> (56 - 8*i))
		}
		return b
	}
	bad := call(5, 1)
	bad[0] = 9
	r.send(t, 0, []byte{1, 2, 3})
	r.send(t, 1, call(6, 5)) // above the window of 4
	r.send(t, 2, bad)
	r.send(t, 3, call(7, 3))
	m := r.answer(t)
	for m.Kind == spec.DaRPCRefused { // a loaded machine: again
		r.send(t, 3, call(m.ID+1, 3))
		m = r.answer(t)
	}
	if m.Kind != spec.DaRPCValues || m.Count != 3 || m.First < 1<<40 {
		t.Fatalf("answer %+v", m)
	}
	st := s.Stats()
	if got := counter(st, "malformed_total"); got != 3 {
		t.Fatalf("malformed %d, want 3: %+v", got, st)
	}
	if st.Served != 3 {
		t.Fatalf("served %d", st.Served)
	}
}

// TestLeastLoadedAndChurn: connections spread over the clusters, and
// admitting and releasing many sessions leaves no connection, slot or CQ
// budget behind.
func TestLeastLoadedAndChurn(t *testing.T) {
	s := newTestServer(t, 2, 8)
	dev := open(t)
	ctx := context.Background()
	var rs []*rawConn
	for range 4 {
		rs = append(rs, newRaw(t, dev))
	}
	var grants []handshake.Grant
	for _, r := range rs {
		g, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{r.ep()}}, handshake.SessionRef{})
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	s.mu.Lock()
	n0, n1 := s.Workers[0].nconns, s.Workers[1].nconns
	s.mu.Unlock()
	if n0 != 2 || n1 != 2 {
		t.Fatalf("connections per cluster %d and %d, want 2 and 2", n0, n1)
	}
	// Over the limit: refused with no capacity.
	many := make([]handshake.Endpoint, 5) // rs[0]'s QP and four more at its address
	for i := range many {
		many[i] = rs[0].ep()
		if i > 0 {
			many[i].QPN = 0x7000 + verbs.QPN(i)
		}
	}
	if _, err := s.Admit(ctx, handshake.Admission{QPs: many}, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrNoCapacity) {
		t.Fatalf("admit beyond MaxClients: %v", err)
	}
	// Replacing a session frees its room in the same step.
	g, err := s.Admit(ctx, handshake.Admission{QPs: many[:4]}, handshake.SessionRef{ID: grants[0].Session, Epoch: 9})
	if err != nil {
		t.Fatalf("replacing admit: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: grants[0].Session, Epoch: 9}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("the replaced session is still there: %v", err)
	}
	for _, x := range append(grants[1:], g) {
		if err := s.Release(ctx, handshake.SessionRef{ID: x.Session, Epoch: 9}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		a := handshake.Admission{QPs: []handshake.Endpoint{rs[i%4].ep(), rs[(i+1)%4].ep()}, Window: 8}
		g, err := s.Admit(ctx, a, handshake.SessionRef{})
		// A released connection's room comes back when its worker
		// reclaims it, after its round: churning faster than a starved
		// worker reclaims is refused for capacity (CI: cycle 201) until
		// the worker catches up, never for good.
		for deadline := time.Now().Add(10 * time.Second); errors.Is(err, dataplane.ErrNoCapacity) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			g, err = s.Admit(ctx, a, handshake.SessionRef{})
		}
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := s.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: 9}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for every released connection to be reclaimed (a worker
	// round ends after its release).
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		left := 0
		for _, w := range s.Workers {
			w.reclaim()
			left += len(w.limbo) + w.nconns + w.cqUsed + (s.cfg.MaxClients - len(w.free))
		}
		sessions := len(s.sessions)
		s.mu.Unlock()
		if left == 0 && sessions == 0 && s.nconns == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %d (sessions %d, conns %d)", left, sessions, s.nconns)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConfig(t *testing.T) {
	dev := open(t)
	for _, c := range []Config{
		{},
		{Config: wk.Config{Device: dev}},
		{Config: wk.Config{Device: dev, Oracle: &claimtest.Oracle{}}, MaxWindow: spec.DaRPCMaxWindow + 1},
		{Config: wk.Config{Device: dev, Oracle: &claimtest.Oracle{}, Workers: 1, Cores: []int{0, 1}}},
		{Config: wk.Config{Device: dev, Oracle: &claimtest.Oracle{}, Workers: -1}},
		{Config: wk.Config{Device: dev, Oracle: &claimtest.Oracle{}}, MaxWindow: 64, CQDepth: 100},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

// TestNoValuesAfterMaxResidence: a worker held up between its claim and
// its doorbell for longer than spec.MaxResidence refuses the calls
// instead: the claimed values are skipped, never handed out late.
func TestNoValuesAfterMaxResidence(t *testing.T) {
	s := newTestServer(t, 1, 0)
	r := newRaw(t, open(t))
	g, err := s.Admit(context.Background(), handshake.Admission{Window: 4, QPs: []handshake.Endpoint{r.ep()}}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	r.attach(t, g, 0)
	stall := func() { time.Sleep(2 * spec.MaxResidence) }
	s.Workers[0].Stall.Store(&stall)
	msg := make([]byte, spec.DaRPCCallLen)
	lateDrops := func() uint64 {
		for _, c := range s.Stats().Counters {
			if c.Name == "drops_total" && c.Reason == "late" {
				return c.Value
			}
		}
		return 0
	}
	// Every call is refused. On a loaded machine a call can also be too
	// old before its claim (expired): send again until one was claimed
	// in time and then held up (late).
	for id := uint64(41); lateDrops() == 0; id++ {
		if id == 41+50 {
			t.Fatalf("no call claimed within MaxResidence in 50 tries: %+v", s.Stats())
		}
		if err := spec.PutDaRPCCall(msg, id, 2); err != nil {
			t.Fatal(err)
		}
		r.send(t, int(id%4), msg)
		if m := r.answer(t); m.Kind != spec.DaRPCRefused || m.ID != id || m.Count != 2 || m.First != 0 {
			t.Fatalf("answer %+v, want the refusal of call %d", m, id)
		}
	}
	if st := s.Stats(); st.Served != 0 {
		t.Fatalf("a stalled worker handed out values: %+v", st)
	}
	// Values were claimed and skipped: the next answer is above them.
	s.Workers[0].Stall.Store(nil)
	if err := spec.PutDaRPCCall(msg, 1000, 1); err != nil {
		t.Fatal(err)
	}
	r.send(t, 3, msg)
	m := r.answer(t)
	for m.Kind == spec.DaRPCRefused { // a loaded machine: again
		spec.PutDaRPCCall(msg, m.ID+1, 1)
		r.send(t, 3, msg)
		m = r.answer(t)
	}
	if m.First < claimtest.First+2 {
		t.Fatalf("value %d: the skipped values were handed out", m.First)
	}
}
