//go:build linux

package soft

import (
	"bufio"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/seqd/seqd/verbs"
)

// scapyVectors reads the scapy-built packets of verbs/rocev2's testdata
// (IPv4 header through ICRC).
func scapyVectors(t *testing.T) map[string][]byte {
	f, err := os.Open("../rocev2/testdata/rocev2-scapy.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := map[string][]byte{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, hx, _ := strings.Cut(line, " ")
		b, err := hex.DecodeString(strings.TrimSpace(hx))
		if err != nil {
			t.Fatal(err)
		}
		v[name] = b
	}
	return v
}

// TestScapyVectorsReceive feeds the scapy packets, whose IPv4 IDs are
// 0x1234, 1, 2 and 3, through the receive path as a UDP socket hands them
// over (without the IPv4 header, so without the ID): every ICRC is
// accepted for its real ID and counted as such, the UD SEND_WITH_IMM is
// delivered with its immediate, source QP and source address, and a
// corrupted copy is dropped as a bad ICRC.
func TestScapyVectorsReceive(t *testing.T) {
	vecs := scapyVectors(t)
	srv := newUDEnd(t, nil, 8)
	x := srv.qp.(*qp)
	// The vector's UD packet is for QP 0x123 with Q_Key 0x11111111.
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
	if _, err := ud.PostRecv([]verbs.RecvWR{{ID: 77, SG: sg}}); err != nil {
		t.Fatal(err)
	}
	q := x.q
	// The vectors were sent to 10.0.0.2:4791.
	saved := q.local
	q.local = netip.MustParseAddrPort("10.0.0.2:4791")
	defer func() { q.local = saved }()
	c := &q.d.ctr
	icrc0, ipid0 := c.dropICRC.Load(), c.rxIPID.Load()
	feed := func(raw []byte) {
		ip := raw[:20]
		udp := raw[20:28]
		q.rxMu.Lock()
		q.rxDst = [4]byte(ip[16:20])
		q.input(raw[28:], [4]byte(ip[12:16]), uint16(udp[0])<<8|uint16(udp[1]))
		q.afterBurst()
		q.rxMu.Unlock()
	}
	for _, name := range []string{"ud_send_imm_header_only", "uc_rdma_write_only", "rc_fetch_add", "rc_atomic_ack"} {
		feed(vecs[name])
	}
	if got := c.dropICRC.Load() - icrc0; got != 0 {
		t.Errorf("%d vectors dropped as bad ICRC", got)
	}
	if got := c.rxIPID.Load() - ipid0; got != 4 {
		t.Errorf("%d ICRCs accepted for a non-zero IPv4 ID, want 4", got)
	}
	wc := make([]verbs.WC, 4)
	if n := srv.cq.(*cq).take(wc); n != 1 {
		t.Fatalf("%d completions, want 1", n)
	}
	w := wc[0]
	if w.Status != verbs.WCSuccess || w.ID != 77 || w.Imm != 0xdeadbeef || w.Flags&verbs.WCWithImm == 0 ||
		w.SrcQP != 0xabc || w.Src.GID.Addr() != netip.MustParseAddr("10.0.0.1") || w.Src.Port != 49152 {
		t.Errorf("completion %+v", w)
	}
	bad := append([]byte(nil), vecs["ud_send_imm_header_only"]...)
	bad[28+20] ^= 1 // the immediate
	feed(bad)
	if got := c.dropICRC.Load() - icrc0; got != 1 {
		t.Errorf("corrupted vector: %d bad-ICRC drops, want 1", got)
	}
}
