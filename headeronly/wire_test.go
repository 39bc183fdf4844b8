package headeronly

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/seqd/seqd/admin/adminpb"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// rawClient is a Spec-S0 client written from spec/PROTOCOL.md's wire rules
// alone: a plain UDP socket that builds and parses RoCEv2 packets itself.
type rawClient struct {
	t       *testing.T
	conn    *net.UDPConn
	addr    verbs.Address // what it registers: 127.0.0.1 and its UDP port
	qpn     uint32
	psn     uint32
	qkey    uint32 // of requests
	ansQKey uint32 // of answers
	corrupt bool   // send an ICRC right for no IPv4 ID
	// tx, when set, is the socket requests leave from (a NIC-style
	// client: a source port of its own, answers to conn on 4791).
	tx *net.UDPConn
}

// verifyAnyID reports whether b's ICRC is right for flow f with some IPv4
// ID: what a UDP socket, which never sees the ID, can check.
func verifyAnyID(f *rocev2.Flow, b []byte) bool {
	_, ok := rocev2.VerifyICRCAnyID(f, b)
	return ok
}

func newRawClient(t *testing.T, qpn uint32) *rawClient {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skipf("udp socket: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	port := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	return &rawClient{t: t, conn: conn, qpn: qpn,
		addr: verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: port}}
}

func (c *rawClient) endpoint() *adminpb.Endpoint {
	a, _ := c.addr.MarshalBinary()
	return &adminpb.Endpoint{Address: a, Qpn: c.qpn}
}

// send sends a header-only request to the server QP at dst: the IPv4 ID
// the kernel writes for this unconnected socket is 0, which is what the
// ICRC assumes. pkey and c.corrupt let a test break the rules; icrcID
// computes the ICRC for another ID (which the server recovers and
// accepts).
func (c *rawClient) send(dst verbs.Address, qpn verbs.QPN, imm spec.Imm, pkey uint16, icrcID uint16) {
	c.t.Helper()
	conn, sport := c.conn, c.addr.Port
	if c.tx != nil {
		conn, sport = c.tx, uint16(c.tx.LocalAddr().(*net.UDPAddr).Port)
	}
	f := rocev2.Flow{Src: c.addr.GID.Addr().As4(), Dst: dst.GID.Addr().As4(), SrcPort: sport, DstPort: dst.Port,
		ID: icrcID, FlagsFrag: 0x4000}
	pk := rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: pkey, DestQP: uint32(qpn), PSN: c.psn,
		QKey: c.qkey, SrcQP: c.qpn, Imm: uint32(imm)}
	b := make([]byte, pk.Len())
	if _, err := pk.Encode(b); err != nil {
		c.t.Fatal(err)
	}
	rocev2.PutICRC(&f, b)
	if c.corrupt {
		b[len(b)-1] ^= 0x80 // right for no IPv4 ID
	}
	c.psn = (c.psn + 1) & 0xffffff
	to := &net.UDPAddr{IP: net.IP(dst.GID.Addr().AsSlice()), Port: int(dst.Port)}
	if _, err := conn.WriteToUDP(b, to); err != nil {
		c.t.Fatal(err)
	}
}

// answer is a received answer and where it came from.
type answer struct {
	from  verbs.Address
	pk    rocev2.Packet
	value uint64
}

// recv reads one answer, or reports false after d. It checks every wire
// rule an answer must meet.
func (c *rawClient) recv(d time.Duration) (answer, bool) {
	c.t.Helper()
	buf := make([]byte, 2048)
	c.conn.SetReadDeadline(time.Now().Add(d))
	n, from, err := c.conn.ReadFromUDP(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return answer{}, false
	}
	if err != nil {
		c.t.Fatal(err)
	}
	b := buf[:n]
	var a answer
	a.from = verbs.Address{GID: verbs.GIDFromAddr(from.AddrPort().Addr().Unmap()), Port: from.AddrPort().Port()}
	if err := a.pk.Decode(b); err != nil {
		c.t.Fatalf("answer %x: %v", b, err)
	}
	f := rocev2.Flow{Src: a.from.GID.Addr().As4(), Dst: c.addr.GID.Addr().As4(), SrcPort: a.from.Port, DstPort: c.addr.RoCEPort(), FlagsFrag: 0x4000}
	switch {
	case !verifyAnyID(&f, b):
		// A lone answer carries ID 0; the k-th segment of a GSO run
		// carries ID k, which this socket cannot see.
		c.t.Fatalf("answer %x: ICRC right for no IPv4 ID", b)
	case a.pk.Opcode != rocev2.UDSendOnlyWithImm:
		c.t.Fatalf("answer opcode %v, want UD SEND_WITH_IMM", a.pk.Opcode)
	case a.pk.PKey != rocev2.DefaultPKey || a.pk.SE || a.pk.MigReq || a.pk.TVer != 0 || a.pk.FECN || a.pk.BECN || a.pk.AckReq:
		c.t.Fatalf("answer BTH %+v: want P_Key 0xffff and no flags", a.pk)
	case a.pk.QKey != c.ansQKey || a.pk.DestQP != c.qpn:
		c.t.Fatalf("answer to QPN 0x%x with Q_Key 0x%x, want 0x%x and 0x%x", a.pk.DestQP, a.pk.QKey, c.qpn, c.ansQKey)
	}
	v, _, err := spec.DecodeAnswer(spec.Imm(a.pk.Imm), a.pk.Payload, 0)
	if err != nil || len(a.pk.Payload) != spec.FullLen {
		c.t.Fatalf("answer payload %x: %v (the guard holds after start: full values only)", a.pk.Payload, err)
	}
	a.value = v
	return a, true
}

// field reads a ConnectResponse field by its proto name, for the fields
// the session rules add (answer_qkey, answer_qps); ok is false when the
// message has no such field.
func field(resp *adminpb.ConnectResponse, name string) (protoreflect.Value, bool) {
	fd := resp.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		return protoreflect.Value{}, false
	}
	return resp.ProtoReflect().Get(fd), true
}

// TestWireRules drives a server with a raw-socket client built from
// PROTOCOL.md's wire rules and checks what the spec says the server does:
// answers come from the worker's response QPs, rotated per batch (never
// from a request QP; from the QPs the reply names, where it names them),
// with P_Key 0xffff, no BTH flags, the session's answer Q_Key and an ICRC
// computed for its IPv4 ID; a request to a connected but non-assigned
// server QP, one from another UDP source port, one with another P_Key and
// one whose ICRC is right for no IPv4 ID are all dropped and counted.
// By default each client QP sends to a request QP of its own, with a
// request Q_Key of its own: then the non-assigned server QP is another
// session's, and a request to it is dropped by the provider (its Q_Key)
// or, sent with that session's Q_Key, by the server (unknown_source).
func TestWireRules(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) { testWireRules(t, shared) })
	}
}

func testWireRules(t *testing.T, shared bool) {
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: &fakeOracle{}, Behind: errBehind, Workers: 2}, MaxWindow: 64, MaxRecv: 128, SharedRecv: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	dev := s.cfg.Device
	cli := newRawClient(t, 0x4242)
	resp, err := pb(s).Connect(context.Background(), &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{cli.endpoint()},
		Window: 8, ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetProtocolVersion() != spec.ProtocolVersion {
		t.Fatalf("reply protocol_version %d", resp.GetProtocolVersion())
	}
	cli.qkey, cli.ansQKey = resp.GetQkey(), resp.GetQkey()
	if v, ok := field(resp, "answer_qkey"); ok && v.Uint() != 0 {
		cli.ansQKey = uint32(v.Uint()) // the session's own answer Q_Key
	}
	eps := resp.GetServerQps()
	var otherQKey uint32 // the request Q_Key of the non-assigned server QP
	if shared {
		if len(eps) != 2 {
			t.Fatalf("%d server QPs, want one per worker (2)", len(eps))
		}
		otherQKey = cli.qkey
	} else {
		if len(eps) != 1 || resp.GetAssignment()[0] != 0 {
			t.Fatalf("%d server QPs, assignment %v: want the client QP's own", len(eps), resp.GetAssignment())
		}
		if resp.GetQkey() == s.cfg.QKey {
			t.Fatalf("request Q_Key %#x is the server's shared one, want the session's own", resp.GetQkey())
		}
		resp2, err := pb(s).Connect(context.Background(), &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{newRawClient(t, 0x4343).endpoint()},
			Window: 8, ProtocolVersion: spec.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, resp2.GetServerQps()[0])
		otherQKey = resp2.GetQkey()
	}
	assigned := int(resp.GetAssignment()[0])
	other := 1 - assigned
	var srv [2]verbs.Address
	var srvQPN [2]verbs.QPN
	for i, ep := range eps {
		if err := srv[i].UnmarshalBinary(ep.GetAddress()); err != nil {
			t.Fatal(err)
		}
		srvQPN[i] = verbs.QPN(ep.GetQpn())
	}
	// The answering QPs, where the reply names them; else any QPN but the
	// request QPs.
	var answerQPNs []verbs.QPN
	if v, ok := field(resp, "answer_qps"); ok {
		for i := range v.List().Len() {
			ep := v.List().Get(i).Message().Interface().(*adminpb.Endpoint)
			answerQPNs = append(answerQPNs, verbs.QPN(ep.GetQpn()))
		}
	}

	// Answers: one per request, from a response QP of the assigned worker
	// (rotating per batch), at the server's address.
	seen := map[verbs.QPN]bool{}
	var last uint64
	for tag := range spec.Tag(12) {
		imm, _ := spec.RequestImm(tag, spec.NoGuess)
		var a answer
		for try := 0; ; try++ {
			aged := s.aged()
			cli.send(srv[assigned], srvQPN[assigned], imm, rocev2.DefaultPKey, 0)
			var ok bool
			if a, ok = cli.recv(5 * time.Second); ok {
				break
			}
			// Dropped for its age on a loaded machine (the worker was
			// descheduled past MaxResidence): retransmitted, as a client
			// would. Any other loss fails.
			if s.aged() == aged || try == 3 {
				t.Fatalf("no answer to tag %d (server %+v)", tag, s.totals())
			}
		}
		src := verbs.QPN(a.pk.SrcQP)
		switch {
		case spec.Imm(a.pk.Imm).Tag() != tag:
			t.Fatalf("answer tag %d, want %d", spec.Imm(a.pk.Imm).Tag(), tag)
		case src == srvQPN[assigned] || src == srvQPN[other]:
			t.Fatalf("answer from request QP %v", src)
		case answerQPNs != nil && !slices.Contains(answerQPNs, src):
			t.Fatalf("answer from QPN %v, not one of the answer QPs %v", src, answerQPNs)
		case a.from.GID != srv[assigned].GID:
			t.Fatalf("answer from %v, server at %v", a.from, srv[assigned])
		case a.value <= last:
			t.Fatalf("value %d after %d", a.value, last)
		}
		seen[src], last = true, a.value
	}
	// The worker rotates over its response QPs batch by batch; each
	// request here is a batch of one.
	if len(seen) != s.cfg.RespQPs {
		t.Errorf("answers came from %d QPs %v, want the worker's %d response QPs", len(seen), seen, s.cfg.RespQPs)
	}

	// Dropped: each of these is counted where the spec says, and never
	// answered.
	drops := func() (unknown uint64, pkey, icrc, qkey uint64) {
		dev.(verbs.Counters).VisitCounters(func(name string, v uint64) {
			switch name {
			case verbs.CounterDropBadPKey:
				pkey = v
			case verbs.CounterDropBadICRC:
				icrc = v
			case verbs.CounterDropBadQKey:
				qkey = v
			}
		})
		return s.totals().Drops["unknown_source"], pkey, icrc, qkey
	}
	u0, p0, i0, q0 := drops()
	imm, _ := spec.RequestImm(100, spec.NoGuess)
	own := cli.qkey
	cli.qkey = otherQKey
	cli.send(srv[other], srvQPN[other], imm, rocev2.DefaultPKey, 0) // connected, not assigned
	cli.qkey = own
	wantQKey := uint64(0)
	if !shared { // with its own Q_Key: refused by the other session's QP itself
		cli.send(srv[other], srvQPN[other], imm, rocev2.DefaultPKey, 0)
		wantQKey = 1
	}
	stranger := newRawClient(t, cli.qpn) // same QPN, another UDP port
	stranger.qkey, stranger.ansQKey = cli.qkey, cli.ansQKey
	stranger.send(srv[assigned], srvQPN[assigned], imm, rocev2.DefaultPKey, 0)
	cli.send(srv[assigned], srvQPN[assigned], imm, 0x1234, 0) // another partition
	cli.corrupt = true
	cli.send(srv[assigned], srvQPN[assigned], imm, rocev2.DefaultPKey, 0) // an ICRC right for no ID
	cli.corrupt = false
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, p, i, q := drops()
		if u-u0 == 2 && p-p0 == 1 && i-i0 == 1 && q-q0 == wantQKey {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drops: unknown_source +%d (want 2), bad P_Key +%d (want 1), bad ICRC +%d (want 1), bad Q_Key +%d (want %d)",
				u-u0, p-p0, i-i0, q-q0, wantQKey)
		}
		time.Sleep(time.Millisecond)
	}
	// The P_Key rule is the IBTA one: the low 15 bits must be 0x7fff
	// (limited membership, 0x7fff, is accepted too).
	for try := 0; ; try++ {
		aged := s.aged()
		cli.send(srv[assigned], srvQPN[assigned], imm, 0x7fff, 0)
		a, ok := cli.recv(5 * time.Second)
		if ok && spec.Imm(a.pk.Imm).Tag() == 100 {
			break
		}
		// Retransmitted only when dropped for its age, as above.
		if ok || s.aged() == aged || try == 3 {
			t.Fatalf("request with P_Key 0x7fff: answered %v (server %+v)", ok, s.totals())
		}
	}
	for _, c := range []*rawClient{cli, stranger} {
		if a, ok := c.recv(50 * time.Millisecond); ok {
			t.Fatalf("a dropped request was answered: %+v", a.pk)
		}
	}
	if s.totals().Requests != 13 {
		t.Fatalf("served %d requests, want 13", s.totals().Requests)
	}
}

// TestNICStyleClient: a client that behaves as an RDMA NIC does registers
// its address with port 0 (the RoCEv2 port), sends its requests from
// another UDP port (a NIC picks one per address handle), and listens on
// 4791. The server knows it by (IP, QPN), not by the source port, and
// answers to 4791, never to the port the request came from.
func TestNICStyleClient(t *testing.T) {
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: &fakeOracle{}, Behind: errBehind, Workers: 1}, MaxWindow: 64, MaxRecv: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ip := net.IPv4(127, byte(1+time.Now().UnixNano()%250), byte(time.Now().UnixNano()>>8), 7)
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: verbs.RoCEv2Port})
	if err != nil {
		t.Skipf("udp socket on %v:4791: %v", ip, err)
	}
	t.Cleanup(func() { rx.Close() })
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ip})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	a, _ := netip.AddrFromSlice(ip.To4())
	cli := &rawClient{t: t, conn: rx, tx: tx, qpn: 0x5151, addr: verbs.Address{GID: verbs.GIDFromAddr(a)}} // Port 0
	resp, err := pb(s).Connect(context.Background(), &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{cli.endpoint()},
		Window: 8, ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	cli.qkey, cli.ansQKey = resp.GetQkey(), resp.GetQkey()
	if v, ok := field(resp, "answer_qkey"); ok && v.Uint() != 0 {
		cli.ansQKey = uint32(v.Uint())
	}
	var srv verbs.Address
	if err := srv.UnmarshalBinary(resp.GetServerQps()[0].GetAddress()); err != nil {
		t.Fatal(err)
	}
	srvQPN := verbs.QPN(resp.GetServerQps()[0].GetQpn())
	var last uint64
	for tag := range spec.Tag(5) {
		imm, _ := spec.RequestImm(tag, spec.NoGuess)
		var ans answer
		for try := 0; ; try++ {
			aged := s.aged()
			cli.send(srv, srvQPN, imm, rocev2.DefaultPKey, 0)
			var ok bool
			if ans, ok = cli.recv(5 * time.Second); ok {
				break
			}
			if s.aged() == aged || try == 3 {
				t.Fatalf("no answer at 4791 to tag %d (server %+v)", tag, s.totals())
			}
		}
		if spec.Imm(ans.pk.Imm).Tag() != tag || ans.value <= last {
			t.Fatalf("answer tag %d value %d after %d, want tag %d", spec.Imm(ans.pk.Imm).Tag(), ans.value, last, tag)
		}
		last = ans.value
	}
	if d := s.totals().Drops["unknown_source"]; d != 0 {
		t.Errorf("%d requests dropped as unknown source", d)
	}
}
