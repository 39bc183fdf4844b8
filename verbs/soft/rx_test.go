package soft

import (
	"encoding/binary"
	"testing"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// TestUDImmRun feeds one GRO-sized run of 28-byte segments through the
// receive path and checks that each segment is judged on its own, as
// input judges single packets: header-only SEND_WITH_IMMs to either of two
// QPs are delivered in order with their immediates; a bad ICRC, a bad
// P_Key, an unknown QPN, a wrong Q_Key and a 28-byte packet of another
// kind (a UD SEND with a 4-byte payload, which goes through the general
// decoder) are each handled and counted; a short tail is malformed.
func TestUDImmRun(t *testing.T) {
	srv := newUDEnd(t, nil, 64)
	src := newUDEnd(t, nil, 1)
	x := srv.qp.(*qp)
	q := x.q
	qp2, err := srv.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: srv.cq, RecvCQ: srv.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp2.Close() })
	if err := verbs.BringUpUD(qp2, verbs.DefaultQKey, 0); err != nil {
		t.Fatal(err)
	}
	x2 := qp2.(*qp)
	rwr := make([]verbs.RecvWR, 64)
	sg := make([]verbs.SGE, 64)
	srv.postRecvs(t, rwr, sg, 0, 32)
	for i := 0; i < 32; i++ {
		sg[i] = verbs.SGE{Addr: srv.mr.Addr() + uint64(32*64+i*64), Length: 64, LKey: srv.mr.LKey()}
		rwr[i] = verbs.RecvWR{ID: uint64(1000 + i), SG: sg[i : i+1]}
	}
	if _, err := qp2.PostRecv(rwr[:32]); err != nil {
		t.Fatal(err)
	}

	from := src.qp.(*qp).q.local
	f := rocev2.Flow{Src: from.Addr().As4(), Dst: q.local.Addr().As4(), SrcPort: from.Port(), DstPort: q.local.Port(), FlagsFrag: 0x4000}
	pre := f.Prefix(rocev2.UDImmLen)
	const n = 40
	buf := make([]byte, n*rocev2.UDImmLen+10)
	var u rocev2.UDImmICRC
	type want struct {
		qpn uint32
		imm uint32
	}
	var wants []want
	for i := 0; i < n; i++ {
		b := buf[i*rocev2.UDImmLen:]
		dst := x.qpn
		if i/5%2 == 1 {
			dst = x2.qpn
		}
		imm := uint32(0x7000 + i)
		u.Put(b, pre, dst, uint32(i), verbs.DefaultQKey, 0x999, imm)
		switch i {
		case 3: // bad ICRC
			b[27] ^= 1
		case 7: // bad P_Key (and an ICRC that matches it)
			b[2] = 0x12
			binary.LittleEndian.PutUint32(b[24:], rocev2.ICRCFrom(pre, b[:rocev2.UDImmLen]))
		case 11: // unknown QPN
			u.Put(b, pre, 0xfffff0, uint32(i), verbs.DefaultQKey, 0x999, imm)
		case 13: // wrong Q_Key
			u.Put(b, pre, dst, uint32(i), 0x1234, 0x999, imm)
		case 17: // a UD SEND with a 4-byte payload: 28 bytes too
			pk := rocev2.Packet{Opcode: rocev2.UDSendOnly, PKey: rocev2.DefaultPKey, DestQP: dst, PSN: uint32(i),
				QKey: verbs.DefaultQKey, SrcQP: 0x999, Payload: []byte{1, 2, 3, 4}}
			if m, err := pk.Encode(b); err != nil || m != rocev2.UDImmLen {
				t.Fatalf("encode: %d, %v", m, err)
			}
			rocev2.PutICRC(&f, b[:rocev2.UDImmLen])
			wants = append(wants, want{dst, 0})
			continue
		default:
			wants = append(wants, want{dst, imm})
			continue
		}
	}
	c := &q.d.ctr
	before := [4]uint64{c.dropICRC.Load(), c.dropPKey.Load(), c.dropQPN.Load(), c.dropQKey.Load()}
	mal := c.dropMalformed.Load()

	q.rxMu.Lock()
	q.rxDst = q.ip
	got := q.inputUDImmRun(buf, from.Addr().As4(), from.Port())
	q.afterBurst()
	q.rxMu.Unlock()
	if got != n+1 {
		t.Errorf("inputUDImmRun: %d segments, want %d and the tail", got, n)
	}
	after := [4]uint64{c.dropICRC.Load(), c.dropPKey.Load(), c.dropQPN.Load(), c.dropQKey.Load()}
	for i, name := range []string{"ICRC", "P_Key", "QPN", "Q_Key"} {
		if after[i]-before[i] != 1 {
			t.Errorf("bad %s: %d drops counted, want 1", name, after[i]-before[i])
		}
	}
	if c.dropMalformed.Load()-mal != 1 {
		t.Errorf("10-byte tail: %d malformed drops, want 1", c.dropMalformed.Load()-mal)
	}
	wc := make([]verbs.WC, 2*n)
	k := srv.cq.(*cq).take(wc)
	if k != len(wants) {
		t.Fatalf("%d completions, want %d", k, len(wants))
	}
	next := map[verbs.QPN]int{}
	for i, w := range wants {
		wc := wc[i]
		if wc.Status != verbs.WCSuccess || wc.QPN != verbs.QPN(w.qpn) {
			t.Fatalf("completion %d: %+v, want one on QP %#x", i, wc, w.qpn)
		}
		if hasImm := wc.Flags&verbs.WCWithImm != 0; hasImm != (w.imm != 0) || wc.Imm != w.imm {
			t.Errorf("completion %d: imm %#x (flag %v), want %#x", i, wc.Imm, hasImm, w.imm)
		}
		id := uint64(next[wc.QPN])
		if wc.QPN == verbs.QPN(x2.qpn) {
			id += 1000
		}
		if wc.ID != id {
			t.Errorf("completion %d: RECV %d, want %d (in order)", i, wc.ID, id)
		}
		next[wc.QPN]++
	}
}

// FuzzDatagram feeds arbitrary datagrams, cut into arbitrary GRO segment
// sizes, to the receive path of a device with a UD QP that has RECVs
// posted. Nothing may panic; every segment is counted once; a completion
// only ever comes from a RECV that was posted, for a segment whose ICRC
// is right.
func FuzzDatagram(f *testing.F) {
	srv := newUDEnd(f, nil, 64)
	src := newUDEnd(f, nil, 1)
	x := srv.qp.(*qp)
	q := x.q
	from := src.qp.(*qp).q.local
	fl := rocev2.Flow{Src: from.Addr().As4(), Dst: q.local.Addr().As4(), SrcPort: from.Port(), DstPort: q.local.Port(), FlagsFrag: 0x4000}
	var u rocev2.UDImmICRC
	run := make([]byte, 3*rocev2.UDImmLen)
	for i := 0; i < 3; i++ {
		u.Put(run[i*rocev2.UDImmLen:], fl.Prefix(rocev2.UDImmLen), x.qpn, uint32(i), verbs.DefaultQKey, 7, uint32(i))
	}
	f.Add(run, uint16(rocev2.UDImmLen))
	f.Add(run[:40], uint16(rocev2.UDImmLen))
	pk := rocev2.Packet{Opcode: rocev2.UDSendOnly, PKey: rocev2.DefaultPKey, DestQP: x.qpn, QKey: verbs.DefaultQKey, SrcQP: 7, Payload: []byte("hello")}
	one := make([]byte, pk.Len())
	pk.Encode(one)
	rocev2.PutICRC(&fl, one)
	f.Add(one, uint16(len(one)))
	f.Add([]byte{0x65, 0, 0xff}, uint16(1))
	rwr := make([]verbs.RecvWR, 64)
	sg := make([]verbs.SGE, 64)
	wc := make([]verbs.WC, 128)
	f.Fuzz(func(t *testing.T, data []byte, seg uint16) {
		if len(data) == 0 {
			return
		}
		s := int(seg)
		if s == 0 || s > len(data) {
			s = len(data)
		}
		srv.postRecvs(t, rwr, sg, 0, 64-x.rqN)
		posted := x.rqN
		q.rxMu.Lock()
		q.rxDst = q.ip
		n := q.datagram(data, s, from.Addr().As4(), from.Port())
		q.afterBurst()
		q.rxMu.Unlock()
		if want := (len(data) + s - 1) / s; n != want {
			t.Fatalf("%d segments of %d bytes counted as %d packets, want %d", len(data), s, n, want)
		}
		good := 0
		for off := 0; off < len(data); off += s {
			// Right for some IPv4 ID: the receiver cannot see the ID.
			b := data[off:min(off+s, len(data))]
			if len(b) >= rocev2.BTHLen+rocev2.ICRCLen {
				var ids rocev2.IDTerms
				ids.Set(len(b))
				if _, ok := ids.Solve(rocev2.ICRC(&fl, b), binary.LittleEndian.Uint32(b[len(b)-rocev2.ICRCLen:])); ok {
					good++
				}
			}
		}
		k := srv.cq.(*cq).take(wc)
		if k > posted || k > good {
			t.Fatalf("%d completions from %d packets (%d with a right ICRC) with %d RECVs posted", k, n, good, posted)
		}
		for _, w := range wc[:k] {
			if w.QPN != verbs.QPN(x.qpn) || w.ID >= 64 {
				t.Fatalf("completion for QP %v RECV %d", w.QPN, w.ID)
			}
		}
	})
}
