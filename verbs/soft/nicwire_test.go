//go:build linux

package soft_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

// TestNICWire runs UD traffic both ways between a soft device with
// nicwire=on (side A, which behaves on the wire as an RDMA NIC does) and
// a plain soft device (side B), over a veth pair, and checks the wire:
// every frame A sent comes from a source port in the RoCE range (not
// 4791), goes to 4791, carries a non-zero IPv4 ID, and has an ICRC that
// scapy finds right over its real headers; B's frames too. B sees A's
// random source port in its completions, and still reaches A by A's
// address (port 4791), as it would a NIC; every value arrives.
func TestNICWire(t *testing.T) {
	v := newVethPair(t)
	var nic, plain verbs.Device
	var capt *pktCapture
	inNS(t, v.nsA, func() {
		var err error
		if nic, err = soft.Open(v.ipA+":4791", verbs.Options{"nicwire": "on"}); err != nil {
			t.Error(err)
		}
	})
	inNS(t, v.nsB, func() {
		capt = openPktCapture(t, "vb", true)
		var err error
		if plain, err = soft.Open(v.ipB+":4791", nil); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	verbstest.CloseLater(t, "device", plain)
	verbstest.CloseLater(t, "device", nic)
	caps := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}
	x := verbstest.NewEndAttr(t, nic, verbs.QPInitAttr{Type: verbs.UD, Cap: caps})
	y := verbstest.NewEndAttr(t, plain, verbs.QPInitAttr{Type: verbs.UD, Cap: caps})
	verbstest.BringUp(t, x)
	verbstest.BringUp(t, y)
	const n = 20
	for i := 0; i < n; i++ {
		verbstest.PostRecv(t, y.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(y.MR, i*256, 256)})
		verbstest.PostRecv(t, x.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(x.MR, i*256, 256)})
	}
	// The addresses peers exchange: a NIC's has Port 0 (4791).
	toB := verbstest.AH(t, x, verbs.Address{GID: y.QP.Address().GID})
	toA := verbstest.AH(t, y, verbs.Address{GID: x.QP.Address().GID})
	payload := func(e *verbstest.End, i int) []verbs.SGE {
		b := e.MR.Bytes()[32<<10+i*64:]
		binary.BigEndian.PutUint64(b, uint64(0xabc000+i))
		return verbstest.SG(e.MR, 32<<10+i*64, 8)
	}
	var wrs []verbs.SendWR
	for i := 0; i < n; i++ {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: uint32(0x100 + i), AH: toB,
			RemoteQPN: y.QP.QPN(), RemoteQKey: verbs.DefaultQKey}
		if i%2 == 1 {
			wr.SG = payload(x, i)
		}
		wrs = append(wrs, wr)
	}
	verbstest.PostSend(t, x.QP, wrs...)
	check := func(what string, wcs []verbs.WC, e *verbstest.End, from *verbstest.End, nicSender bool) {
		t.Helper()
		for i, w := range wcs {
			if w.Status != verbs.WCSuccess || w.Imm != uint32(0x100+i) || w.SrcQP != from.QP.QPN() ||
				w.Src.GID != from.QP.Address().GID {
				t.Fatalf("%s: receive %d: %s", what, i, verbstest.FormatWC(w))
			}
			if nicSender && (w.Src.Port < 0xc000 || w.Src.Port == verbs.RoCEv2Port) {
				t.Errorf("%s: receive %d from source port %d, want a NIC-style one", what, i, w.Src.Port)
			}
			if i%2 == 1 {
				if w.ByteLen != verbs.GRHLen+8 {
					t.Fatalf("%s: receive %d: %d bytes", what, i, w.ByteLen)
				}
				if got := binary.BigEndian.Uint64(e.MR.Bytes()[int(w.ID)*256+verbs.GRHLen:]); got != uint64(0xabc000+i) {
					t.Errorf("%s: receive %d: payload %#x", what, i, got)
				}
			}
		}
	}
	check("NIC to soft", verbstest.PollN(t, y.RecvCQ, n, 20*time.Second), y, x, true)
	// B answers as a server does: to A's address, not to the source
	// port it saw.
	wrs = wrs[:0]
	for i := 0; i < n; i++ {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: uint32(0x100 + i), AH: toA,
			RemoteQPN: x.QP.QPN(), RemoteQKey: verbs.DefaultQKey}
		if i%2 == 1 {
			wr.SG = payload(y, i)
		}
		wrs = append(wrs, wr)
	}
	verbstest.PostSend(t, y.QP, wrs...)
	check("soft to NIC", verbstest.PollN(t, x.RecvCQ, n, 20*time.Second), x, y, false)

	frames := capt.roceFrames(2*n, 10*time.Second)
	if len(frames) != 2*n {
		t.Fatalf("captured %d RoCEv2 frames, want %d", len(frames), 2*n)
	}
	ok, ids := scapyVerdicts(t, frames)
	a := netip.MustParseAddr(v.ipA).As4()
	fromNIC := 0
	for i, f := range frames {
		ip := f[14:]
		sport := binary.BigEndian.Uint16(ip[20:])
		if !ok[i] {
			t.Errorf("frame %d (%v, IPv4 ID %d): ICRC wrong for its real headers", i, netip.AddrFrom4([4]byte(ip[12:16])), ids[i])
		}
		if [4]byte(ip[12:16]) != a {
			continue
		}
		fromNIC++
		if ids[i] == 0 || sport < 0xc000 {
			t.Errorf("frame %d from the NIC-like side: IPv4 ID %d, source port %d", i, ids[i], sport)
		}
	}
	if fromNIC != n {
		t.Errorf("%d frames from the NIC-like side, want %d", fromNIC, n)
	}
}
