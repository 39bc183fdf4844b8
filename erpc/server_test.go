package erpc

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

func open(t testing.TB) verbs.Device { return claimtest.OpenSoft(t, "") }

func newServerCfg(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Device == nil {
		cfg.Device = open(t)
	}
	if cfg.Oracle == nil {
		cfg.Oracle = &claimtest.Oracle{}
	}
	cfg.Behind = claimtest.ErrBehind
	cfg.Epoch = 7
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newServer(t testing.TB, orc *claimtest.Oracle, workers int) *Server {
	return newServerCfg(t, Config{Config: wk.Config{Oracle: orc, Workers: workers}})
}

func ep(a verbs.Address, q verbs.QPN) handshake.Endpoint { return handshake.Endpoint{Addr: a, QPN: q} }

func addr(i int) verbs.Address {
	return verbs.Address{GID: verbs.GIDFromAddr(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})), Port: 4791}
}

type rawClient struct {
	e       *verbstest.End
	ah      verbs.AH
	dst     verbs.QPN
	qkey    uint32
	session uint64
}

func admitRaw(t *testing.T, s *Server, credits int) *rawClient {
	t.Helper()
	e := verbstest.NewEnd(t, open(t), verbs.UD)
	g, err := s.Admit(context.Background(), handshake.Admission{QPs: []handshake.Endpoint{ep(e.QP.Address(), e.QP.QPN())}, Window: credits},
		handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.BringUpUD(e.QP, g.AnswerQKey, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		verbstest.PostRecv(t, e.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(e.MR, i*128, 128)})
	}
	srv := g.ServerQPs[g.Assignment[0]]
	return &rawClient{e: e, ah: verbstest.AH(t, e, srv.Addr), dst: srv.QPN, qkey: g.QKey, session: g.Session}
}

func (c *rawClient) send(t *testing.T, payload []byte) {
	t.Helper()
	off := 4096
	copy(c.e.MR.Bytes()[off:], payload)
	wr := verbs.SendWR{ID: 9, Opcode: verbs.OpSend, Flags: verbs.Signaled, AH: c.ah, RemoteQPN: c.dst, RemoteQKey: c.qkey}
	if len(payload) > 0 {
		wr.SG = verbstest.SG(c.e.MR, off, len(payload))
	}
	verbstest.PostSend(t, c.e.QP, wr)
	verbstest.PollOne(t, c.e.SendCQ, 5*time.Second)
}

func (c *rawClient) req(slot int, rn uint64, k int) []byte {
	b := make([]byte, spec.ERPCRequestLen)
	if err := spec.PutERPCHeader(b, spec.ERPCHeader{Op: spec.ERPCOpRequest, Slot: slot, Count: k, Session: c.session, ReqNum: rn}); err != nil {
		panic(err)
	}
	return b
}

// answer waits for one answer and decodes it.
func (c *rawClient) answer(t *testing.T) (spec.ERPCHeader, uint64) {
	t.Helper()
	wc := verbstest.PollOne(t, c.e.RecvCQ, 5*time.Second)
	if wc.Status != verbs.WCSuccess || int(wc.ByteLen) != verbs.GRHLen+spec.ERPCAnswerLen {
		t.Fatalf("answer %s", verbstest.FormatWC(wc))
	}
	off := int(wc.ID) * 128
	h, first, err := spec.DecodeERPC(c.e.MR.Bytes()[off+verbs.GRHLen : off+int(wc.ByteLen)])
	if err != nil {
		t.Fatal(err)
	}
	verbstest.PostRecv(t, c.e.QP, verbs.RecvWR{ID: wc.ID, SG: verbstest.SG(c.e.MR, int(wc.ID)*128, 128)})
	return h, first
}

func counter(s *Server, name, reason string) uint64 {
	for _, c := range s.Stats().Counters {
		if c.Name == name && c.Reason == reason {
			return c.Value
		}
	}
	return 0
}

func waitCounter(t *testing.T, s *Server, name, reason string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for counter(s, name, reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s} = %d, want %d", name, reason, counter(s, name, reason), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRetransmissionSameValue: a request sent again under the same
// session, slot and request number gets the same values back, and the
// oracle is not asked again (at-most-once); the next request number
// runs; a lower one is dropped as stale. The answers go through the
// verifier's at-most-once check.
func TestRetransmissionSameValue(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 1)
	c := admitRaw(t, s, 8)
	var log verify.Answers
	c.send(t, c.req(3, 1, 4))
	h1, v1 := c.answer(t)
	if h1.Op != spec.ERPCOpAnswer || h1.Slot != 3 || h1.ReqNum != 1 || h1.Count != 4 || h1.Session != c.session {
		t.Fatalf("answer %+v", h1)
	}
	log.Record(c.session, h1.Slot, h1.ReqNum, v1)
	// A worker counts a burst after its doorbell: the answer may be here
	// before the count of its 4 values.
	served := s.Stats().Served
	for deadline := time.Now().Add(5 * time.Second); served < 4 && time.Now().Before(deadline); served = s.Stats().Served {
		time.Sleep(time.Millisecond)
	}
	if served != 4 {
		t.Fatalf("served %d values for one request of 4", served)
	}
	for range 3 {
		c.send(t, c.req(3, 1, 4))
		h, v := c.answer(t)
		if v != v1 || h != h1 {
			t.Fatalf("retransmission answered %+v %d, first answer %+v %d", h, v, h1, v1)
		}
		log.Record(c.session, h.Slot, h.ReqNum, v)
	}
	if st := s.Stats(); st.Served != served {
		t.Fatalf("served %d values after retransmissions, %d before: a retransmission ran again", st.Served, served)
	}
	waitCounter(t, s, "resends_total", "", 3)
	c.send(t, c.req(3, 2, 1))
	h2, v2 := c.answer(t)
	if h2.ReqNum != 2 || v2 < v1+4 {
		t.Fatalf("next request number answered %+v %d after %d", h2, v2, v1)
	}
	log.Record(c.session, h2.Slot, h2.ReqNum, v2)
	c.send(t, c.req(3, 1, 4)) // older than the slot's: stale
	waitCounter(t, s, "drops_total", "stale", 1)
	c.send(t, c.req(3, 2, 5)) // the number last answered, another count
	waitCounter(t, s, "drops_total", "mismatch", 1)
	verbstest.ExpectEmpty(t, c.e.RecvCQ, "answers to stale or mismatched requests")
	if err := log.Report().Err(); err != nil {
		t.Fatal(err)
	}
}

// TestHostileInput: malformed packets, a forged session, a sender never
// admitted, a bad slot, a huge count, more packets than credits, and
// answers sent to the server are dropped and counted, never answered and
// never a panic; a good request is answered afterwards.
func TestHostileInput(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 1)
	c := admitRaw(t, s, 2)
	other := admitRaw(t, s, 2)
	bad := c.req(0, 1, 1)
	bad[0] = 9
	c.send(t, bad)
	c.send(t, c.req(0, 1, 1)[:10])
	c.send(t, nil)
	slot := c.req(0, 1, 1)
	slot[2] = spec.ERPCSlots // bad slot
	c.send(t, slot)
	huge := c.req(0, 1, 1)
	binary.BigEndian.PutUint16(huge[4:], spec.ERPCMaxRange+1)
	c.send(t, huge)
	zero := c.req(0, 1, 1)
	binary.BigEndian.PutUint64(zero[16:], 0) // request number 0
	c.send(t, zero)
	waitCounter(t, s, "drops_total", "malformed", 6)
	ans := make([]byte, spec.ERPCAnswerLen)
	spec.PutERPCAnswer(ans, spec.ERPCHeader{Op: spec.ERPCOpAnswer, Slot: 0, Count: 1, Session: c.session, ReqNum: 1}, 5)
	c.send(t, ans)
	waitCounter(t, s, "drops_total", "bad_opcode", 1)
	// c names other's session: forged.
	forged := c.req(0, 1, 1)
	binary.BigEndian.PutUint64(forged[8:], other.session)
	c.send(t, forged)
	waitCounter(t, s, "drops_total", "wrong_session", 1)
	// A QP never admitted.
	stranger := &rawClient{e: verbstest.NewEnd(t, open(t), verbs.UD), dst: c.dst, qkey: c.qkey, session: c.session}
	if err := verbs.BringUpUD(stranger.e.QP, 1, 0); err != nil {
		t.Fatal(err)
	}
	stranger.ah = verbstest.AH(t, stranger.e, s.Workers[0].ReqQP.Address())
	stranger.send(t, stranger.req(0, 1, 1))
	waitCounter(t, s, "drops_total", "unknown_source", 1)
	verbstest.ExpectEmpty(t, c.e.RecvCQ, "answers to bad requests")
	verbstest.ExpectEmpty(t, other.e.RecvCQ, "answers to a forged session")
	if st := s.Stats(); st.Served != 0 {
		t.Fatalf("served %d values to bad requests", st.Served)
	}
	c.send(t, c.req(1, 1, 2))
	if h, v := c.answer(t); h.ReqNum != 1 || h.Count != 2 || v == 0 {
		t.Fatalf("good request answered %+v %d", h, v)
	}
}

// TestPing: a ping is answered with a pong of its number, claiming
// nothing.
func TestPing(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 1)
	c := admitRaw(t, s, 2)
	b := make([]byte, spec.ERPCRequestLen)
	spec.PutERPCHeader(b, spec.ERPCHeader{Op: spec.ERPCOpPing, Session: c.session, ReqNum: 42})
	c.send(t, b)
	h, v := c.answer(t)
	if h.Op != spec.ERPCOpPong || h.ReqNum != 42 || v != 0 {
		t.Fatalf("pong %+v %d", h, v)
	}
	if st := s.Stats(); st.Served != 0 {
		t.Fatalf("a ping claimed %d values", st.Served)
	}
}

// TestAdmissionCredits: sessions are admitted while sessions × credits
// fit the receive capacity (here a receive buffer of 100 requests) and
// refused past it with ErrNoCapacity; releasing one admits another.
func TestAdmissionCredits(t *testing.T) {
	s := newServerCfg(t, Config{Config: wk.Config{Workers: 1}, RecvBuffer: 100})
	ctx := context.Background()
	if got := s.Capacity(); got != 100 {
		t.Fatalf("capacity %d, want 100", got)
	}
	var refs []handshake.SessionRef
	for i := range 12 { // 12 × 8 = 96 ≤ 100
		g, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(i), 0x10)}}, handshake.SessionRef{})
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if g.Window != spec.ERPCDefaultCredits {
			t.Fatalf("granted %d credits, want the default %d", g.Window, spec.ERPCDefaultCredits)
		}
		refs = append(refs, handshake.SessionRef{ID: g.Session, Epoch: g.Epoch})
	}
	_, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(99), 0x10)}}, handshake.SessionRef{})
	if !errors.Is(err, dataplane.ErrNoCapacity) {
		t.Fatalf("13th session of 8 credits in a capacity of 100: %v", err)
	}
	t.Logf("refusal: %v", err)
	// Fewer credits still fit.
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(99), 0x10)}, Window: 4}, handshake.SessionRef{}); err != nil {
		t.Fatalf("a session of 4 credits in the 4 left: %v", err)
	}
	if err := s.Release(ctx, refs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(98), 0x10)}}, handshake.SessionRef{}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if counter(s, "refused_total", "") != 1 {
		t.Fatalf("refused_total %d, want 1", counter(s, "refused_total", ""))
	}
}

// TestAdmissionDeviceBuffer: the soft provider reports its socket
// receive buffer, and the server's capacity is at most what it holds.
func TestAdmissionDeviceBuffer(t *testing.T) {
	dev := open(t)
	b, ok := dev.(verbs.RecvBufferer)
	if !ok {
		t.Fatal("the soft device does not report its receive buffer")
	}
	n := b.RecvBuffer(spec.ERPCRequestLen)
	if n <= 0 {
		t.Fatalf("receive buffer of %d requests", n)
	}
	s := newServerCfg(t, Config{Config: wk.Config{Device: dev, Workers: 1}})
	if c := s.Capacity(); c > n || c <= 0 {
		t.Fatalf("capacity %d with a receive buffer of %d requests", c, n)
	}
	t.Logf("soft receive buffer: %d requests; capacity %d credits", n, s.Capacity())
}

// TestLifecycleIdempotent: Stop and Close may be called again; Admit
// after Stop is unavailable; Release of an unknown session or another
// epoch's is ErrUnknownSession.
func TestLifecycleIdempotent(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 2)
	ctx := context.Background()
	g, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(1), 1)}}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: 6}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("release in another epoch: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: 7}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: 7}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("second release: %v", err)
	}
	for range 2 {
		if high, err := s.Stop(); err != nil || high != 0 {
			t.Fatalf("Stop = %d, %v", high, err)
		}
	}
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(2), 1)}}, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrUnavailable) {
		t.Fatalf("Admit after Stop: %v", err)
	}
	s.Close()
	s.Close()
}

// TestChurnBoundsState admits and releases sessions from many addresses:
// nothing is left behind.
func TestChurnBoundsState(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 2)
	ctx := context.Background()
	for i := range 2000 {
		g, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(i), 1)}}, handshake.SessionRef{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: g.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Sessions != 0 || counter(s, "credits", "") != 0 {
		t.Fatalf("after churn: %d sessions, %d credits", st.Sessions, counter(s, "credits", ""))
	}
}

// TestStartFailureIsAnError: a worker that cannot be built (more
// response QPs than the device has) fails New with an error, cleaning
// up what it made, and does not panic.
func TestStartFailureIsAnError(t *testing.T) {
	_, err := New(Config{Config: wk.Config{Device: open(t), Oracle: &claimtest.Oracle{}, RespQPs: 1000, Workers: 1,
		Logger: slog.New(slog.DiscardHandler)}})
	if err == nil {
		t.Fatal("New with 1000 response QPs per worker succeeded")
	}
}
