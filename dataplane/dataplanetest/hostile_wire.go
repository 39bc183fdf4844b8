package dataplanetest

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// hostileOps are the operations a hostile client sends, on every
// transport its grant could reach.
var hostileOps = []rocev2.Opcode{rocev2.OpSendOnly, rocev2.OpSendOnlyWithImm, rocev2.OpWriteOnly, rocev2.OpWriteOnlyWithImm,
	rocev2.OpReadRequest, rocev2.OpFetchAdd, rocev2.OpCompareSwap}

// testHostilePackets: an admitted client that breaks the protocol, here
// a bare UDP socket that forges well-formed RoCEv2 packets (right ICRC,
// Q_Key and first PSN, as its grant tells it) of every operation on
// every transport, with random payloads, immediates, addresses, keys
// and operands, to every server QP its grant names, then random bytes.
// The mode neither panics nor stops serving: an honest client admitted
// afterwards gets its calls answered in order. The provider's counters
// show the forged packets reached the server's QPs (not all dropped for
// a bad ICRC).
func testHostilePackets(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	src := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	me := verbs.Address{GID: verbs.GIDFromAddr(src.Addr()), Port: src.Port()}
	rng := rand.New(rand.NewPCG(1, 2))
	send := func(dst handshake.Endpoint, p *rocev2.Packet) {
		b := make([]byte, p.Len())
		if _, err := p.Encode(b); err != nil {
			t.Fatalf("encode %v: %v", p.Opcode, err)
		}
		f := rocev2.Flow{Src: src.Addr().As4(), Dst: dst.Addr.GID.Addr().As4(), SrcPort: src.Port(), DstPort: dst.Addr.RoCEPort(),
			FlagsFrag: 0x4000}
		rocev2.PutICRC(&f, b)
		if _, err := conn.WriteToUDPAddrPort(b, netip.AddrPortFrom(dst.Addr.GID.Addr(), dst.Addr.RoCEPort())); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	forge := func(op rocev2.Opcode, dst handshake.Endpoint, psn uint32, g handshake.Grant, i int) *rocev2.Packet {
		p := &rocev2.Packet{Opcode: op, PKey: rocev2.DefaultPKey, DestQP: uint32(dst.QPN), PSN: psn & 0xffffff, AckReq: true,
			QKey: g.QKey, SrcQP: 0x100, Imm: rng.Uint32(), VA: rng.Uint64(), RKey: rng.Uint32(), DMALen: uint32(rng.IntN(64)),
			SwapAdd: rng.Uint64(), Compare: rng.Uint64()}
		if i < len(g.RemoteAddr) && rng.IntN(2) == 0 { // aim inside the memory the grant names
			p.VA, p.RKey = g.RemoteAddr[i]+uint64(rng.IntN(64)), g.RKey[i]
		}
		if op.HasPayload() {
			p.Payload = make([]byte, rng.IntN(65))
			for j := range p.Payload {
				p.Payload[j] = byte(rng.Uint32())
			}
			if op.HasRETH() {
				p.DMALen = uint32(len(p.Payload))
			}
		}
		return p
	}
	var icrc uint64
	cnt, counted := in.cfg.Device.(verbs.Counters)
	read := func() (rx, bad uint64) {
		cnt.VisitCounters(func(name string, v uint64) {
			switch name {
			case verbs.CounterRxPackets:
				rx = v
			case verbs.CounterDropBadICRC:
				bad = v
			}
		})
		return
	}
	if counted {
		_, icrc = read()
	}
	sent, junks := 0, 0
	for k, op := range hostileOps {
		for _, tr := range []rocev2.Opcode{rocev2.TransportRC, rocev2.TransportUC, rocev2.TransportUD} {
			full := tr | op
			if !full.Valid() || !full.IsRequest() {
				continue
			}
			// A fresh session per operation and transport: its
			// connections expect their first PSN, which the grant told.
			a := h.admission(0, 1)
			for j := range a.QPs {
				a.QPs[j].Addr = me
			}
			for j := range a.ConnQPs {
				a.ConnQPs[j].Addr = me
			}
			g, err := in.Admit(ctx, a, handshake.SessionRef{})
			if err != nil {
				t.Fatalf("Admit of the hostile client (%v): %v", full, err)
			}
			for i, dst := range g.ServerConnQPs {
				psn := uint32(k)
				if i < len(g.ConnPSNs) {
					psn = uint32(g.ConnPSNs[i])
				}
				for n := range 16 {
					send(dst, forge(full, dst, psn+uint32(n), g, i))
					sent++
				}
			}
			for i, dst := range append(append([]handshake.Endpoint(nil), g.ServerQPs...), g.AnswerQPs...) {
				send(dst, forge(full, dst, rng.Uint32(), g, i))
				sent++
			}
			for _, dst := range append(append([]handshake.Endpoint(nil), g.ServerQPs...), g.ServerConnQPs...) {
				junk := make([]byte, 12+rng.IntN(80))
				for j := range junk {
					junk[j] = byte(rng.Uint32())
				}
				if _, err := conn.WriteToUDPAddrPort(junk, netip.AddrPortFrom(dst.Addr.GID.Addr(), dst.Addr.RoCEPort())); err != nil {
					t.Fatalf("send: %v", err)
				}
				junks++
			}
			if err := in.Release(ctx, ref(g)); err != nil {
				t.Fatalf("Release of the hostile client: %v", err)
			}
		}
	}
	// The honest client: its calls are queued behind the forged packets.
	c := dial(t, h.serveAdmin(t, in), "127.0.0.1:0", "")
	h.calls(t, c, 50, 0)
	if counted {
		// The honest calls came after the forged packets on the same
		// socket: those are counted by now.
		if _, bad := read(); bad-icrc > uint64(junks) {
			t.Fatalf("%d of %d forged packets dropped for a bad ICRC: they did not reach the mode", bad-icrc-uint64(junks), sent)
		}
	}
	t.Logf("%d forged packets and %d of random bytes sent; the mode kept serving", sent, junks)
}
