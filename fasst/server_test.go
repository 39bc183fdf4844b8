package fasst

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
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

func open(t testing.TB) verbs.Device { return claimtest.OpenSoft(t, "") }

func newServer(t testing.TB, orc *claimtest.Oracle, workers, maxClients int) *Server {
	t.Helper()
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: orc, Behind: claimtest.ErrBehind, Workers: workers,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), Epoch: 7, MaxSessionRecv: -1}, MaxClients: maxClients}) // no session cap: the tests fill workers with single sessions
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ep(a verbs.Address, q verbs.QPN) handshake.Endpoint { return handshake.Endpoint{Addr: a, QPN: q} }

func addr(i int) verbs.Address {
	return verbs.Address{GID: verbs.GIDFromAddr(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})), Port: 4791}
}

func TestAdmitRefusals(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 2, 2)
	ctx := context.Background()
	ok := handshake.Admission{QPs: []handshake.Endpoint{ep(addr(1), 0x10)}, Window: 4}
	g, err := s.Admit(ctx, ok, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Window != 4 || g.Epoch != 7 || g.AnswerQKey == 0 || g.AnswerQKey == g.QKey || len(g.ServerQPs) != 2 ||
		len(g.Assignment) != 1 || len(g.AnswerQPs) != 2*wk.DefaultRespQPs {
		t.Fatalf("grant %+v", g)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		a    handshake.Admission
		want error
	}{
		{"no-qps", ctx, handshake.Admission{}, dataplane.ErrInvalidArgument},
		{"negative-window", ctx, handshake.Admission{QPs: ok.QPs, Window: -1}, dataplane.ErrInvalidArgument},
		{"qpn-too-big", ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(2), 1<<24)}}, dataplane.ErrInvalidArgument},
		{"same-qp-twice", ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(2), 1), ep(addr(2), 1)}}, dataplane.ErrInvalidArgument},
		{"already-connected", ctx, ok, dataplane.ErrFailedPrecondition},
		{"caller-gone", cancelled, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(3), 1)}}, dataplane.ErrUnavailable},
		{"windows-beyond-receives", ctx, handshake.Admission{QPs: manyQPs(2 * DefaultRecvQueue / DefaultMaxWindow), Window: DefaultMaxWindow}, dataplane.ErrNoCapacity},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := s.Admit(c.ctx, c.a, handshake.SessionRef{}); !errors.Is(err, c.want) {
				t.Fatalf("Admit = %v, want %v", err, c.want)
			}
		})
	}
	// Replacing takes the old session's QPs; a wrong epoch replaces
	// nothing.
	if _, err := s.Admit(ctx, ok, handshake.SessionRef{ID: g.Session, Epoch: 6}); !errors.Is(err, dataplane.ErrFailedPrecondition) {
		t.Fatalf("replace in another epoch: %v", err)
	}
	g2, err := s.Admit(ctx, ok, handshake.SessionRef{ID: g.Session, Epoch: 7})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: 7}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("release the replaced session: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g2.Session, Epoch: 6}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("release in another epoch: %v", err)
	}
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(4), 1)}}, handshake.SessionRef{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{ep(addr(5), 1)}}, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrNoCapacity) {
		t.Fatalf("third session of MaxClients 2: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g2.Session, Epoch: 7}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Sessions != 1 {
		t.Fatalf("%d sessions, want 1", st.Sessions)
	}
	if _, err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(ctx, ok, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrUnavailable) {
		t.Fatalf("Admit after Stop: %v", err)
	}
}

func manyQPs(n int) []handshake.Endpoint {
	out := make([]handshake.Endpoint, n)
	for i := range out {
		out[i] = ep(addr(100), verbs.QPN(0x1000+i))
	}
	return out
}

// rawClient is an admitted UD QP that sends hand-made requests.
type rawClient struct {
	e    *verbstest.End
	ah   verbs.AH
	dst  verbs.QPN
	qkey uint32
}

func admitRaw(t *testing.T, s *Server, window int) *rawClient {
	t.Helper()
	return admitRawOn(t, s, open(t), window)
}

// admitRawOn is admitRaw with the client's QP on dev.
func admitRawOn(t *testing.T, s *Server, dev verbs.Device, window int) *rawClient {
	t.Helper()
	e := verbstest.NewEnd(t, dev, verbs.UD)
	g, err := s.Admit(context.Background(), handshake.Admission{QPs: []handshake.Endpoint{ep(e.QP.Address(), e.QP.QPN())}, Window: window},
		handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.BringUpUD(e.QP, g.AnswerQKey, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		verbstest.PostRecv(t, e.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(e.MR, i*64, 64)})
	}
	srv := g.ServerQPs[g.Assignment[0]]
	return &rawClient{e: e, ah: verbstest.AH(t, e, srv.Addr), dst: srv.QPN, qkey: g.QKey}
}

// send sends payload (with an immediate if imm).
func (c *rawClient) send(t *testing.T, payload []byte, imm bool) {
	t.Helper()
	off := 2048
	copy(c.e.MR.Bytes()[off:], payload)
	wr := verbs.SendWR{ID: 9, Opcode: verbs.OpSend, Flags: verbs.Signaled, AH: c.ah, RemoteQPN: c.dst, RemoteQKey: c.qkey}
	if len(payload) > 0 {
		wr.SG = verbstest.SG(c.e.MR, off, len(payload))
	}
	if imm {
		wr.Opcode = verbs.OpSendWithImm
	}
	verbstest.PostSend(t, c.e.QP, wr)
	verbstest.PollOne(t, c.e.SendCQ, 5*time.Second)
}

// call sends a request for k values under id until it is answered (a
// request can expire at a loaded server, as a lost one would) and
// returns the answer's completion.
func (c *rawClient) call(t *testing.T, k int, id spec.FaSSTID) verbs.WC {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.send(t, request(k, id), false)
		wcs := make([]verbs.WC, 1)
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
			if n, err := c.e.RecvCQ.Poll(wcs); err != nil || n == 1 {
				if err != nil {
					t.Fatal(err)
				}
				return wcs[0]
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	t.Fatalf("no answer to %s", id)
	return verbs.WC{}
}

func request(k int, id spec.FaSSTID) []byte {
	b := make([]byte, spec.FaSSTRequestLen)
	spec.PutFaSSTRequest(b, k, id)
	return b
}

func dropCount(s *Server, reason string) uint64 {
	for _, c := range s.Stats().Counters {
		if c.Name == "drops_total" && c.Reason == reason {
			return c.Value
		}
	}
	return 0
}

func waitDrops(t *testing.T, s *Server, reason string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for dropCount(s, reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("drops{%s} = %d, want %d", reason, dropCount(s, reason), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBadRequests: malformed requests, counts beyond spec.FaSSTMaxRange and
// requests from QPs never admitted are dropped and counted; a good
// request is answered with its ID and count echoed.
func TestBadRequests(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 1, 0)
	c := admitRaw(t, s, 4)
	bad := request(2, 5)
	bad[0] = 9 // version
	c.send(t, bad, false)
	c.send(t, request(2, 5)[:7], false)
	c.send(t, nil, false)
	waitDrops(t, s, "malformed", 3)
	c.send(t, request(2, 5), true)
	waitDrops(t, s, "bad_opcode", 1)
	big := request(2, 6)
	binary.BigEndian.PutUint16(big[2:], spec.FaSSTMaxRange+1) // more than a range may hold
	c.send(t, big, false)
	waitDrops(t, s, "malformed", 4)
	// A QP never admitted, sending with the request Q_Key.
	stranger := &rawClient{e: verbstest.NewEnd(t, open(t), verbs.UD), dst: c.dst, qkey: c.qkey}
	if err := verbs.BringUpUD(stranger.e.QP, 1, 0); err != nil {
		t.Fatal(err)
	}
	stranger.ah = verbstest.AH(t, stranger.e, s.Workers[0].ReqQP.Address())
	stranger.send(t, request(1, 7), false)
	waitDrops(t, s, "unknown_source", 1)
	verbstest.ExpectEmpty(t, c.e.RecvCQ, "answers to bad requests")

	wc := c.call(t, 3, 0xabcdef01)
	if wc.Status != verbs.WCSuccess || int(wc.ByteLen) != verbs.GRHLen+spec.FaSSTAnswerLen {
		t.Fatalf("answer %s", verbstest.FormatWC(wc))
	}
	off := int(wc.ID) * 64
	h, first, err := spec.DecodeFaSSTAnswer(c.e.MR.Bytes()[off+verbs.GRHLen : off+int(wc.ByteLen)])
	if err != nil || h.ID != 0xabcdef01 || h.Count != 3 || first < 1<<40 {
		t.Fatalf("answer %+v first %d: %v", h, first, err)
	}
	if from := (verbs.Senders{verbs.SenderOf(s.AnswerQPs[0].Addr, s.AnswerQPs[0].QPN), verbs.SenderOf(s.AnswerQPs[1].Addr, s.AnswerQPs[1].QPN),
		verbs.SenderOf(s.AnswerQPs[2].Addr, s.AnswerQPs[2].QPN)}); !from.Match(&wc) {
		t.Fatalf("answer from %v qpn %v, not a response QP", wc.Src, wc.SrcQP)
	}
	// A worker counts a batch after its doorbell: the answer may be here
	// before the count.
	st := s.Stats()
	for deadline := time.Now().Add(5 * time.Second); st.Served == 0 && time.Now().Before(deadline); st = s.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.Served%3 != 0 || st.Served == 0 {
		t.Fatalf("served %d values, want a multiple of 3 (requests for 3)", st.Served)
	}
}

// TestNoAnswerAfterMaxResidence: while the oracle is behind, a request is
// kept no longer than spec.MaxResidence and then dropped, never answered.
func TestNoAnswerAfterMaxResidence(t *testing.T) {
	orc := &claimtest.Oracle{}
	s := newServer(t, orc, 1, 0)
	c := admitRaw(t, s, 4)
	orc.SetRefuse(true)
	c.send(t, request(2, 1), false)
	waitDrops(t, s, "expired", 1)
	orc.SetRefuse(false)
	verbstest.ExpectEmpty(t, c.e.RecvCQ, "an answer after the oracle caught up")
	if st := s.Stats(); st.Served != 0 {
		t.Fatalf("served %d while the oracle was behind (stalls %d)", st.Served, st.Stalls)
	}
	// Once the oracle is back, requests are answered again.
	c.call(t, 1, 2)
}

// TestStopMovesToErr: after Stop the request and response QPs are in the
// error state (late requests get no answer) and Stop claims nothing
// outside the oracle.
func TestStopMovesToErr(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 2, 0)
	high, err := s.Stop()
	if err != nil || high != 0 {
		t.Fatalf("Stop = %d, %v", high, err)
	}
	for _, w := range s.Workers {
		if st := w.ReqQP.State(); st != verbs.StateErr {
			t.Errorf("worker %d request QP in %v", w.ID, st)
		}
		for _, qp := range w.Resp.QPs() {
			if st := qp.State(); st != verbs.StateErr {
				t.Errorf("worker %d response QP in %v", w.ID, st)
			}
		}
	}
}

// answerOf decodes the answer wc carries.
func (c *rawClient) answerOf(t *testing.T, wc verbs.WC) (spec.FaSSTHeader, uint64) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || int(wc.ByteLen) != verbs.GRHLen+spec.FaSSTAnswerLen {
		t.Fatalf("answer %s", verbstest.FormatWC(wc))
	}
	off := int(wc.ID) * 64
	h, first, err := spec.DecodeFaSSTAnswer(c.e.MR.Bytes()[off+verbs.GRHLen : off+int(wc.ByteLen)])
	if err != nil {
		t.Fatal(err)
	}
	verbstest.PostRecv(t, c.e.QP, verbs.RecvWR{ID: wc.ID, SG: verbstest.SG(c.e.MR, int(wc.ID)*64, 64)})
	return h, first
}

// TestRanges: a request for more values than the window (a caller's
// range, up to spec.FaSSTMaxRange) is answered with its k values; in the
// hybrid format a range that would span a millisecond boundary starts at
// the boundary (the values below it are skipped), while in the counter
// format it is answered where it falls.
func TestRanges(t *testing.T) {
	const ms = uint64(spec.HybridMillisecond)
	for _, c := range []struct {
		name   string
		format spec.Format
		skip   uint64 // values claimed before the request, from claimtest.First
		k      int
		want   uint64 // the answer's first value, from claimtest.First
	}{
		{"range-beyond-window", spec.FormatHybrid, 0, 100, 0},
		{"max-range", spec.FormatHybrid, 5, spec.FaSSTMaxRange, 5},
		{"fits-below-boundary", spec.FormatHybrid, ms - 100, 100, ms - 100},
		// The claim of the batch spans the boundary and the range does not
		// fit above it: a second claim answers it.
		{"moved-past-boundary", spec.FormatHybrid, ms - 99, 100, ms + 1},
		{"max-range-moved", spec.FormatHybrid, ms - 10, spec.FaSSTMaxRange, ms + spec.FaSSTMaxRange - 10},
		{"single-at-last-value", spec.FormatHybrid, ms - 1, 1, ms - 1},
		{"counter-spans", spec.FormatCounter, ms - 99, 100, ms - 99},
	} {
		t.Run(c.name, func(t *testing.T) {
			orc := &claimtest.Oracle{}
			s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: orc, Behind: claimtest.ErrBehind, Workers: 1,
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), Epoch: 7}, Format: c.format})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cl := admitRaw(t, s, 4)
			if c.skip > 0 {
				orc.Claim(int(c.skip))
			}
			h, first := cl.answerOf(t, cl.call(t, c.k, 0x77))
			if h.ID != 0x77 || h.Count != c.k || first != claimtest.First+c.want {
				t.Fatalf("answer %+v first First+%d, want count %d first First+%d", h, first-claimtest.First, c.k, c.want)
			}
			if c.format == spec.FormatHybrid && spec.CrossesMillisecond(first, c.k) {
				t.Fatalf("range First+%d … +%d spans a millisecond", first-claimtest.First, c.k)
			}
			for deadline := time.Now().Add(5 * time.Second); s.Stats().Served != uint64(c.k); {
				if time.Now().After(deadline) {
					t.Fatalf("served %d values, want %d", s.Stats().Served, c.k) // counted after the doorbell
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// TestNICStyleClient: a client QP on a device that behaves on the wire as
// an RDMA NIC does (soft nicwire=on: on 4791, every packet from a UDP
// source port chosen at random per address handle) registers its address
// on 4791 and sends from another port. The server knows it by (IP, QPN),
// not by the source port, and answers it at 4791 (issue 28: fasst
// matched the exact registered address and dropped every request as an
// unknown source).
func TestNICStyleClient(t *testing.T) {
	s := newServer(t, &claimtest.Oracle{}, 1, 0)
	ip := netip.AddrFrom4([4]byte{127, byte(1 + time.Now().UnixNano()%250), byte(time.Now().UnixNano() >> 8), 9})
	o, err := verbs.ParseOptions("nicwire=on")
	if err != nil {
		t.Fatal(err)
	}
	nic, err := verbs.Open("soft", netip.AddrPortFrom(ip, verbs.RoCEv2Port).String(), o)
	if err != nil {
		t.Skipf("a NIC-like soft device (needs CAP_NET_RAW and %v:4791 free): %v", ip, err)
	}
	t.Cleanup(func() { nic.Close() })
	c := admitRawOn(t, s, nic, 4)
	for id := range spec.FaSSTID(3) {
		h, _ := c.answerOf(t, c.call(t, 1, id))
		if h.ID != id || h.Count != 1 {
			t.Fatalf("answer %+v to %s", h, id)
		}
	}
	if d := dropCount(s, "unknown_source"); d != 0 {
		t.Errorf("%d requests dropped as unknown source", d)
	}
}
