package headeronly

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/modes/adminmode"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

// The fake oracle and soft devices every mode's tests share.
type fakeOracle = claimtest.Oracle

var errBehind = claimtest.ErrBehind

func open(t *testing.T) verbs.Device { return claimtest.OpenSoft(t, "") }

// pb is s as package modes serves it: through the admin protocol.
func pb(s *Server) *adminmode.Backend {
	b := &adminmode.Backend{Mode: s, Name: spec.ModeSpecS0, Metrics: "headeronly", Format: s.cfg.Format,
		Epoch: s.cfg.Epoch, Device: s.cfg.Device, Oracle: s.cfg.Oracle}
	return b
}

func newServer(t *testing.T, o dataplane.Claimer) *Server {
	t.Helper()
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: o, Behind: errBehind, Workers: 2, MaxSessionRecv: -1}, MaxWindow: 64, MaxRecv: 128}) // no session cap: the tests fill workers with single sessions
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// aged counts the requests dropped for their age (expired before the
// claim, late before the doorbell): on a loaded machine a test resends
// them under a fresh tag, as a client does.
func (s *Server) aged() uint64 {
	d := s.totals().Drops
	return d["expired"] + d["late"]
}

func TestConnectRefusals(t *testing.T) {
	s := newServer(t, &fakeOracle{})
	ep := func(port uint16, qpn uint32) *adminpb.Endpoint {
		a, _ := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: port}.MarshalBinary()
		return &adminpb.Endpoint{Address: a, Qpn: qpn}
	}
	ctx := context.Background()
	cases := []struct {
		name string
		req  *adminpb.ConnectRequest
		want error
	}{
		{"other mode", &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{ep(1, 1)}, Mode: "herd", ProtocolVersion: spec.ProtocolVersion}, admin.ErrFailedPrecondition},
		{"old protocol", &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{ep(1, 1)}, ProtocolVersion: spec.ProtocolVersion - 1}, admin.ErrFailedPrecondition},
		{"bad address", &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{{Address: []byte{1}, Qpn: 1}}, ProtocolVersion: spec.ProtocolVersion}, admin.ErrInvalidArgument},
		{"receive budget", &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{ep(1, 1), ep(1, 2), ep(1, 3), ep(1, 4), ep(1, 5)}, Window: 64, ProtocolVersion: spec.ProtocolVersion}, admin.ErrNoCapacity},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pb(s).Connect(ctx, c.req); !errors.Is(err, c.want) {
				t.Fatalf("Connect = %v, want %v", err, c.want)
			}
		})
	}
	resp, err := pb(s).Connect(ctx, &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{ep(1, 1), ep(1, 2)}, Window: 1000, ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetWindow() != 64 || len(resp.GetAssignment()) != 2 || resp.GetAssignment()[0] == resp.GetAssignment()[1] {
		t.Fatalf("granted window %d, assignment %v", resp.GetWindow(), resp.GetAssignment())
	}
	if err := pb(s).Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: resp.GetSessionId(), Epoch: resp.GetEpoch()}); err != nil {
		t.Fatal(err)
	}
	if err := pb(s).Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: resp.GetSessionId(), Epoch: resp.GetEpoch()}); !errors.Is(err, admin.ErrUnknownSession) {
		t.Fatalf("second Disconnect = %v", err)
	}
}

// TestServeAndDropUnknown: an admitted QP gets answers (full values while
// the guard holds, through oracle stalls); an unknown QP is dropped and
// counted.
func TestServeAndDropUnknown(t *testing.T) {
	s := newServer(t, &fakeOracle{BehindEvery: 3})
	dev := open(t)
	cli := verbstest.NewEnd(t, dev, verbs.UD)
	stranger := verbstest.NewEnd(t, dev, verbs.UD)
	for _, e := range []*verbstest.End{cli, stranger} {
		if err := verbs.BringUpUD(e.QP, verbs.DefaultQKey, 0); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := cli.QP.Address().MarshalBinary()
	resp, err := pb(s).Connect(context.Background(), &adminpb.ConnectRequest{
		Qps: []*adminpb.Endpoint{{Address: a, Qpn: uint32(cli.QP.QPN())}}, Window: 8, ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	// Answers carry the session's own Q_Key: the admitted QP takes it.
	if k := resp.GetAnswerQkey(); k == 0 || k == resp.GetQkey() || k&0x80000000 != 0 {
		t.Fatalf("answer Q_Key %#x (request Q_Key %#x): want a session's own", k, resp.GetQkey())
	}
	if err := cli.QP.Modify(&verbs.QPAttr{QKey: resp.GetAnswerQkey()}, verbs.AttrQKey); err != nil {
		t.Fatal(err)
	}
	var from verbs.Senders
	for _, e := range resp.GetAnswerQps() {
		var a verbs.Address
		if err := a.UnmarshalBinary(e.GetAddress()); err != nil {
			t.Fatal(err)
		}
		from = append(from, verbs.SenderOf(a, verbs.QPN(e.GetQpn())))
	}
	if len(from) != 2*3 { // Workers × the default RespQPs
		t.Fatalf("%d answer QPs, want 6", len(from))
	}
	srv := resp.GetServerQps()[resp.GetAssignment()[0]]
	var dst verbs.Address
	dst.UnmarshalBinary(srv.GetAddress())
	send := func(e *verbstest.End, tag spec.Tag) {
		ah := verbstest.AH(t, e, dst)
		wr := []verbs.SendWR{{ID: 1, Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled, Imm: uint32(spec.MustRequestImm(tag, spec.NoGuess)),
			AH: ah, RemoteQPN: verbs.QPN(srv.GetQpn()), RemoteQKey: resp.GetQkey()}}
		if _, err := e.QP.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*verbstest.End{cli, stranger} {
		for i := range 8 {
			verbstest.PostRecv(t, e.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(e.MR, i*64, 64)})
		}
	}
	send(stranger, 1)
	for tag := range spec.Tag(3) {
		send(cli, tag)
	}
	// A request that waited longer than MaxResidence before the worker
	// read it, or before its answer's doorbell (a loaded machine), is
	// dropped as expired or late: resend it under a fresh tag, as a client
	// does.
	var wcs []verbs.WC
	buf := make([]verbs.WC, 3)
	next, resent := spec.Tag(3), uint64(0)
	for deadline := time.Now().Add(5 * time.Second); len(wcs) < 3; time.Sleep(time.Millisecond) {
		n, err := cli.RecvCQ.Poll(buf[:3-len(wcs)])
		if err != nil {
			t.Fatal(err)
		}
		wcs = append(wcs, buf[:n]...)
		for ; resent < s.aged() && next < 16; resent++ {
			send(cli, next)
			next++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 answers: %+v", len(wcs), s.totals())
		}
	}
	var prev uint64
	for _, wc := range wcs {
		if !from.Match(&wc) {
			t.Fatalf("answer from QPN %v at %v: not one of the answer QPs named at Connect", wc.SrcQP, wc.Src)
		}
		if wc.ByteLen != verbs.GRHLen+spec.FullLen {
			t.Fatalf("answer of %d bytes during the holdoff, want a full value", wc.ByteLen)
		}
		v, _, err := spec.DecodeAnswer(spec.Imm(wc.Imm), cli.MR.Bytes()[wc.ID*64+verbs.GRHLen:][:spec.FullLen], 0)
		if err != nil || v <= prev {
			t.Fatalf("answer %d after %d: %v", v, prev, err)
		}
		prev = v
	}
	deadline := time.Now().Add(5 * time.Second)
	for (s.totals().Drops["unknown_source"] != 1 || s.totals().Requests != 3) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := s.totals()
	if st.Drops["unknown_source"] != 1 || st.Requests != 3 {
		t.Fatalf("stats %+v", st)
	}
}
