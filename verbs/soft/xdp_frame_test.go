//go:build linux

package soft

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// withXDP makes q process frames as its AF_XDP bursts do (no socket:
// frames are fed to q.frame).
func withXDP(t testing.TB, q *queue) {
	q.rxMu.Lock()
	q.xdp, q.d.xdp = &xdpRx{}, &xdpDev{}
	q.rxMu.Unlock()
	t.Cleanup(func() {
		q.rxMu.Lock()
		q.xdp, q.d.xdp = nil, nil
		q.rxMu.Unlock()
	})
}

// TestScapyVectorsReceiveFrame feeds the scapy packets, in Ethernet
// frames, through the AF_XDP receive path (frame parser, then the
// provider's decode and ICRC check with the IPv4 ID from the header):
// every ICRC checks with nothing recovered (rx_icrc_ip_id stays 0), the
// UD SEND_WITH_IMM is delivered, and the same packet with another IPv4
// ID in a valid header (which the socket path would accept, recovering
// the ID) or a flipped bit is dropped as a bad ICRC.
func TestScapyVectorsReceiveFrame(t *testing.T) {
	vecs := scapyVectors(t)
	srv := newUDEnd(t, nil, 8)
	var ud *qp
	for ud == nil {
		y, err := srv.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: srv.cq, RecvCQ: srv.cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { y.Close() })
		switch {
		case y.QPN() == 0x123:
			ud = y.(*qp)
		case y.QPN() > 0x123:
			t.Fatalf("QPN %v passed 0x123", y.QPN())
		}
	}
	if err := verbs.BringUpUD(ud, 0x11111111, 0); err != nil {
		t.Fatal(err)
	}
	sg := []verbs.SGE{{Addr: srv.mr.Addr(), Length: 64, LKey: srv.mr.LKey()}}
	if _, err := ud.PostRecv([]verbs.RecvWR{{ID: 77, SG: sg}, {ID: 78, SG: sg}}); err != nil {
		t.Fatal(err)
	}
	q := ud.q
	withXDP(t, q)
	// The vectors were sent to port 4791 of 10.0.0.2, and one (the ACK)
	// of 10.0.0.1: a device bound to every address takes both.
	saved, savedW := q.local, q.wildcard
	q.local, q.wildcard = netip.MustParseAddrPort("10.0.0.2:4791"), true
	defer func() { q.local, q.wildcard = saved, savedW }()
	c := &q.d.ctr
	icrc0, ipid0, qpn0 := c.dropICRC.Load(), c.rxIPID.Load(), c.dropQPN.Load()
	feed := func(raw []byte) int {
		q.rxMu.Lock()
		defer q.rxMu.Unlock()
		n := q.frame(ethernet(raw))
		q.xdp.inFrame = false
		q.afterBurst()
		return n
	}
	for _, name := range []string{"ud_send_imm_header_only", "uc_rdma_write_only", "rc_fetch_add", "rc_atomic_ack"} {
		if n := feed(vecs[name]); n != 1 {
			t.Errorf("%s: %d packets", name, n)
		}
	}
	if got := c.dropICRC.Load() - icrc0; got != 0 {
		t.Errorf("%d vectors dropped as bad ICRC", got)
	}
	if got := c.rxIPID.Load() - ipid0; got != 0 {
		t.Errorf("%d IPv4 IDs recovered: the frame path reads them", got)
	}
	// The UC and RC vectors are for QPs that do not exist here.
	if got := c.dropQPN.Load() - qpn0; got != 3 {
		t.Errorf("%d unknown-QP drops, want 3", got)
	}
	wc := make([]verbs.WC, 4)
	if n := srv.cq.(*cq).take(wc); n != 1 {
		t.Fatalf("%d completions, want 1", n)
	}
	if w := wc[0]; w.Status != verbs.WCSuccess || w.ID != 77 || w.Imm != 0xdeadbeef || w.SrcQP != 0xabc ||
		w.Src.GID.Addr() != netip.MustParseAddr("10.0.0.1") || w.Src.Port != 49152 {
		t.Errorf("completion %+v", w)
	}
	// Another ID in a header whose checksum is right.
	other := append([]byte(nil), vecs["ud_send_imm_header_only"]...)
	other[5] ^= 0x01
	binary.BigEndian.PutUint16(other[10:], 0)
	binary.BigEndian.PutUint16(other[10:], ^fold(sum16(other[:20], 0)))
	feed(other)
	if got := c.dropICRC.Load() - icrc0; got != 1 {
		t.Errorf("vector with another IPv4 ID: %d bad-ICRC drops, want 1", got)
	}
	bad := append([]byte(nil), vecs["ud_send_imm_header_only"]...)
	bad[28+20] ^= 1 // the immediate
	feed(bad)
	if got := c.dropICRC.Load() - icrc0; got != 2 {
		t.Errorf("corrupted vector: %d bad-ICRC drops, want 2", got)
	}
	if n := srv.cq.(*cq).take(wc); n != 0 {
		t.Errorf("%d completions from bad packets", n)
	}
}

// BenchmarkRxUDFrame measures the AF_XDP receive path per packet without
// the ring: 64 Ethernet frames of header-only UD SEND_WITH_IMMs, each
// through the frame parser (lengths, IPv4 and UDP checksums), the ICRC
// check with the header's IPv4 ID, decode, QP lookup, RECV consumption,
// GRH write and completion; plus the poll and re-post a server does.
// flows=1: one sender, consecutive IDs (a GSO run); flows=1024: each
// packet from another source port, as from 1,024 clients.
func BenchmarkRxUDFrame(b *testing.B) {
	for _, flows := range []int{1, 1024} {
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) { benchRxUDFrame(b, flows) })
	}
}

func benchRxUDFrame(b *testing.B, flows int) {
	srv := newUDEnd(b, nil, 256)
	rwr := make([]verbs.RecvWR, 256)
	sg := make([]verbs.SGE, 256)
	srv.postRecvs(b, rwr, sg, 0, 256)
	x := srv.qp.(*qp)
	q := x.q
	withXDP(b, q)
	const batch = 64
	frames := make([][]byte, 0, flows)
	for i := range max(flows, batch) {
		port := uint16(40000 + i%flows)
		fr := rocev2.Frame{TTL: 64, UDPChecksum: 0, Flow: rocev2.Flow{Src: [4]byte{198, 51, 100, 1}, Dst: q.ip,
			SrcPort: port, DstPort: q.local.Port(), ID: uint16(i + 1), FlagsFrag: 0x4000},
			Packet: rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: 0xffff, DestQP: x.qpn, PSN: uint32(i),
				QKey: verbs.DefaultQKey, SrcQP: 0x999, Imm: uint32(i)}}
		ip, err := rocev2.AppendFrame(nil, &fr)
		if err != nil {
			b.Fatal(err)
		}
		f := ethernet(ip)
		// The pseudo-header's sum, as veth delivers a local sender's.
		udp := f[frameEthLen+20:]
		binary.BigEndian.PutUint16(udp[6:], fold(sum16(f[frameEthLen+12:frameEthLen+20], 17+uint64(len(udp)))))
		frames = append(frames, f)
	}
	wc := make([]verbs.WC, batch)
	next, k := 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		q.rxMu.Lock()
		for range batch {
			if q.frame(frames[k]) != 1 {
				b.Fatal("frame refused")
			}
			if k++; k == len(frames) {
				k = 0
			}
		}
		q.xdp.inFrame = false
		q.unlockRQ()
		q.flushPend()
		q.rxMu.Unlock()
		n := srv.cq.(*cq).take(wc)
		if n != batch || wc[0].Status != verbs.WCSuccess {
			b.Fatalf("%d completions, %+v", n, wc[0])
		}
		srv.postRecvs(b, rwr, sg, next, n)
		next = (next + n) % 256
	}
	b.StopTimer()
	if c := &q.d.ctr; c.dropICRC.Load() != 0 || c.rxIPID.Load() != 0 {
		b.Fatalf("ICRC drops %d, recovered IDs %d", c.dropICRC.Load(), c.rxIPID.Load())
	}
}
