package verbstest

import (
	"testing"

	"github.com/seqd/seqd/verbs"
)

func udTests() []test {
	tests := []test{}
	for _, c := range []struct {
		name string
		op   verbs.Opcode
		n    int
	}{
		{"Payload", verbs.OpSend, 200},
		{"ImmPayload", verbs.OpSendWithImm, 512},
		{"HeaderOnlyImm", verbs.OpSendWithImm, 0},
		{"HeaderOnly", verbs.OpSend, 0},
	} {
		tests = append(tests, test{"UD/Send/" + c.name, func(t *testing.T, a, b verbs.Device) {
			testUDSend(t, a, b, c.op, c.n)
		}})
	}
	return append(tests,
		test{"UD/ReplyToSrc", testUDReplyToSrc},
		test{"UD/GatherScatter", testUDGatherScatter},
		test{"UD/Inline", testUDInline},
		test{"UD/DropNoRecv", testUDDropNoRecv},
		test{"UD/BadQKey", testUDBadQKey},
		test{"UD/ChainUnsignaled", testUDChainUnsignaled},
		test{"UD/ChainSigAll", testUDChainSigAll},
		test{"UD/ChainMixed", testUDChainMixed},
	)
}

// udWR is a signaled UD send of n bytes at offset 0 of from's MR.
func udWR(from *End, ah verbs.AH, to *End, id uint64, op verbs.Opcode, imm uint32, n int) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: op, Flags: verbs.Signaled, SG: SG(from.MR, 0, n), Imm: imm,
		AH: ah, RemoteQPN: to.QP.QPN(), RemoteQKey: verbs.DefaultQKey}
}

// sendImm sends a header-only SEND_WITH_IMM from x to y and waits for its
// send completion.
func sendImm(t *testing.T, x *End, ah verbs.AH, y *End, id uint64, imm uint32) {
	t.Helper()
	PostSend(t, x.QP, udWR(x, ah, y, id, verbs.OpSendWithImm, imm, 0))
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), id, verbs.WCSend)
}

// checkUDRecv checks a UD receive completion of an n-byte message sent by
// from to to.
func checkUDRecv(t *testing.T, wc verbs.WC, id uint64, from, to *End, n int, withImm bool, imm uint32) {
	t.Helper()
	ExpectWC(t, wc, id, verbs.WCRecv)
	if want := uint32(verbs.GRHLen + n); wc.ByteLen != want {
		t.Errorf("UD receive ByteLen %d, want GRHLen+%d = %d", wc.ByteLen, n, want)
	}
	if wc.Flags&verbs.WCGRH == 0 {
		t.Errorf("UD receive completion lacks WCGRH: %s", FormatWC(wc))
	}
	if got := wc.Flags&verbs.WCWithImm != 0; got != withImm {
		t.Errorf("UD receive WCWithImm is %v, want %v: %s", got, withImm, FormatWC(wc))
	} else if withImm && wc.Imm != imm {
		t.Errorf("UD receive Imm %#x, want %#x", wc.Imm, imm)
	}
	if wc.QPN != to.QP.QPN() {
		t.Errorf("UD receive QPN %v, want the receiver %v", wc.QPN, to.QP.QPN())
	}
	if wc.SrcQP != from.QP.QPN() {
		t.Errorf("UD receive SrcQP %v, want the sender %v", wc.SrcQP, from.QP.QPN())
	}
	src := from.QP.Address()
	if wc.Src.GID != src.GID || wc.Src.Port != src.Port {
		t.Errorf("UD receive Src %v, want the sender's address %v", wc.Src, src)
	}
}

// checkGRH checks the GRH area of a UD receive buffer: for IPv4 its last
// 20 bytes are the IPv4 header, as on hardware.
func checkGRH(t *testing.T, buf []byte, src, dst verbs.Address) {
	t.Helper()
	s, d := src.GID.Addr(), dst.GID.Addr()
	if !s.Is4() || !d.Is4() {
		return
	}
	ip := buf[verbs.GRHLen-20 : verbs.GRHLen]
	if ip[0]>>4 != 4 {
		t.Errorf("GRH area: byte 20 is %#02x, want an IPv4 header (version 4): % x", ip[0], buf[:verbs.GRHLen])
		return
	}
	s4, d4 := s.As4(), d.As4()
	checkBytes(t, "GRH area: IPv4 source", ip[12:16], s4[:])
	checkBytes(t, "GRH area: IPv4 destination", ip[16:20], d4[:])
}

func testUDSend(t *testing.T, a, b verbs.Device, op verbs.Opcode, n int) {
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	rbuf := y.MR.Bytes()[:verbs.GRHLen+1024]
	Fill(rbuf, 0xee)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 7, SG: SG(y.MR, 0, len(rbuf))})
	payload := Pattern(n, 1)
	copy(x.MR.Bytes(), payload)
	const imm = 0xc0ffee01
	PostSend(t, x.QP, udWR(x, ah, y, 1, op, imm, n))

	swc := PollOne(t, x.SendCQ, DefaultTimeout)
	ExpectWC(t, swc, 1, verbs.WCSend)
	if swc.QPN != x.QP.QPN() {
		t.Errorf("send completion QPN %v, want %v", swc.QPN, x.QP.QPN())
	}
	rwc := PollOne(t, y.RecvCQ, DefaultTimeout)
	checkUDRecv(t, rwc, 7, x, y, n, op == verbs.OpSendWithImm, imm)
	checkBytes(t, "payload at offset GRHLen", rbuf[verbs.GRHLen:verbs.GRHLen+n], payload)
	checkUntouched(t, "receive buffer after the payload", rbuf[verbs.GRHLen+n:], 0xee)
	checkGRH(t, rbuf, x.QP.Address(), y.QP.Address())
	ExpectEmpty(t, y.RecvCQ, "after one UD message")
	ExpectEmpty(t, x.SendCQ, "after one UD send")
}

// testUDReplyToSrc answers a message through an AH made from the
// completion's Src, as a server answers a client it never heard of.
func testUDReplyToSrc(t *testing.T, a, b verbs.Device) {
	x, y := UDPair(t, a, b)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 1, SG: SG(y.MR, 0, 256)})
	PostRecv(t, x.QP, verbs.RecvWR{ID: 2, SG: SG(x.MR, 1024, 256)})
	sendImm(t, x, AH(t, x, y.QP.Address()), y, 10, 0x1111)
	req := PollOne(t, y.RecvCQ, DefaultTimeout)
	checkUDRecv(t, req, 1, x, y, 0, true, 0x1111)

	back := AH(t, y, req.Src)
	copy(y.MR.Bytes()[4096:], "pong")
	PostSend(t, y.QP, verbs.SendWR{ID: 20, Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled,
		SG: SG(y.MR, 4096, 4), Imm: 0x2222, AH: back, RemoteQPN: req.SrcQP, RemoteQKey: verbs.DefaultQKey})
	ExpectWC(t, PollOne(t, y.SendCQ, DefaultTimeout), 20, verbs.WCSend)
	rep := PollOne(t, x.RecvCQ, DefaultTimeout)
	checkUDRecv(t, rep, 2, y, x, 4, true, 0x2222)
	checkBytes(t, "reply payload", x.MR.Bytes()[1024+verbs.GRHLen:1024+verbs.GRHLen+4], []byte("pong"))
}

// testUDGatherScatter sends two gathered pieces into a receive list that
// puts the GRH in its own 40-byte element.
func testUDGatherScatter(t *testing.T, a, b verbs.Device) {
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	p1, p2 := Pattern(50, 3), Pattern(100, 9)
	copy(x.MR.Bytes()[100:], p1)
	copy(x.MR.Bytes()[300:], p2)
	Fill(y.MR.Bytes()[:2048], 0xee)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 5, SG: []verbs.SGE{SGE(y.MR, 0, verbs.GRHLen), SGE(y.MR, 1000, 500)}})
	PostSend(t, x.QP, verbs.SendWR{ID: 6, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SG: []verbs.SGE{SGE(x.MR, 100, 50), SGE(x.MR, 300, 100)}, AH: ah, RemoteQPN: y.QP.QPN(), RemoteQKey: verbs.DefaultQKey})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 6, verbs.WCSend)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 5, x, y, 150, false, 0)
	buf := y.MR.Bytes()
	checkBytes(t, "scattered payload", buf[1000:1150], append(p1, p2...))
	checkUntouched(t, "between GRH and payload", buf[verbs.GRHLen:1000], 0xee)
	checkUntouched(t, "after payload", buf[1150:1500], 0xee)
	checkGRH(t, buf, x.QP.Address(), y.QP.Address())
}

// testUDInline checks that an inline payload is copied at post time.
func testUDInline(t *testing.T, a, b verbs.Device) {
	inl := min(64, a.Attr().MaxInline)
	if inl < 32 {
		t.Skipf("device supports %d inline bytes", a.Attr().MaxInline)
	}
	x := NewEndAttr(t, a, verbs.QPInitAttr{Type: verbs.UD, Cap: verbs.QPCap{MaxInlineData: inl}})
	y := NewEnd(t, b, verbs.UD)
	BringUp(t, x)
	BringUp(t, y)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 1, SG: SG(y.MR, 0, 256)})
	p := Pattern(32, 5)
	copy(x.MR.Bytes(), p)
	wr := udWR(x, AH(t, x, y.QP.Address()), y, 2, verbs.OpSend, 0, 32)
	wr.Flags |= verbs.Inline
	PostSend(t, x.QP, wr)
	Fill(x.MR.Bytes()[:32], 0xff) // the buffer is free once PostSend returns
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 2, verbs.WCSend)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 1, x, y, 32, false, 0)
	checkBytes(t, "inline payload", y.MR.Bytes()[verbs.GRHLen:verbs.GRHLen+32], p)
}

// testUDDropNoRecv: a UD SEND that finds no RECV posted is dropped, not
// kept for a RECV posted later.
func testUDDropNoRecv(t *testing.T, a, b verbs.Device) {
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	base, counted := Counter(b, verbs.CounterDropNoRecv)

	sendImm(t, x, ah, y, 1, 0xd1)
	// Prove the first message reached the receiver before posting a RECV
	// it could land in.
	if counted {
		WaitCounter(t, b, verbs.CounterDropNoRecv, base+1, DefaultTimeout)
	} else {
		t.Logf("device has no %s counter: ordering through a second QP instead", verbs.CounterDropNoRecv)
		barrier(t, x, b)
	}
	PostRecv(t, y.QP, verbs.RecvWR{ID: 2, SG: SG(y.MR, 0, 256)})
	sendImm(t, x, ah, y, 3, 0xd2)
	wc := PollOne(t, y.RecvCQ, DefaultTimeout)
	if wc.Imm == 0xd1 {
		t.Fatalf("the SEND sent while no RECV was posted was delivered to a later RECV: %s", FormatWC(wc))
	}
	checkUDRecv(t, wc, 2, x, y, 0, true, 0xd2)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 4, SG: SG(y.MR, 0, 256)})
	sendImm(t, x, ah, y, 5, 0xd3)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 4, x, y, 0, true, 0xd3)
	ExpectEmpty(t, y.RecvCQ, "after the marker")
}

// barrier sends a marker from x to a fresh QP on dev and waits for it:
// what x sent before reached dev (on one port, in order).
func barrier(t *testing.T, x *End, dev verbs.Device) {
	t.Helper()
	z := NewEnd(t, dev, verbs.UD)
	BringUp(t, z)
	PostRecv(t, z.QP, verbs.RecvWR{ID: 99, SG: SG(z.MR, 0, 256)})
	sendImm(t, x, AH(t, x, z.QP.Address()), z, 98, 0xba)
	checkUDRecv(t, PollOne(t, z.RecvCQ, DefaultTimeout), 99, x, z, 0, true, 0xba)
}

// testUDBadQKey: a SEND with the wrong Q_Key is dropped; the next one
// with the right key arrives in the RECV the first would have used.
func testUDBadQKey(t *testing.T, a, b verbs.Device) {
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	base, counted := Counter(b, verbs.CounterDropBadQKey)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 1, SG: SG(y.MR, 0, 256)}, verbs.RecvWR{ID: 2, SG: SG(y.MR, 256, 256)})
	bad := udWR(x, ah, y, 10, verbs.OpSendWithImm, 0xbad, 0)
	bad.RemoteQKey = verbs.DefaultQKey ^ 0x5a5a
	PostSend(t, x.QP, bad, udWR(x, ah, y, 11, verbs.OpSendWithImm, 0x600d, 0))
	for i, wc := range PollN(t, x.SendCQ, 2, DefaultTimeout) {
		ExpectWC(t, wc, uint64(10+i), verbs.WCSend) // UD sends complete locally
	}
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 1, x, y, 0, true, 0x600d)
	sendImm(t, x, ah, y, 12, 0x600e)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 2, x, y, 0, true, 0x600e)
	if counted {
		WaitCounter(t, b, verbs.CounterDropBadQKey, base+1, DefaultTimeout)
	}
}

const chainLen = 32

func needWRs(t *testing.T, dev verbs.Device, n int) {
	t.Helper()
	if m := dev.Attr().MaxQPWR; m < n {
		t.Skipf("device allows %d WRs per queue, test needs %d", m, n)
	}
}

// testUDChainUnsignaled posts 32 header-only SENDs in one PostSend with
// only the last signaled, and polls the 32 receives 16 at a time.
func testUDChainUnsignaled(t *testing.T, a, b verbs.Device) {
	needWRs(t, a, chainLen)
	needWRs(t, b, chainLen)
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	recvs := make([]verbs.RecvWR, chainLen)
	for i := range recvs {
		recvs[i] = verbs.RecvWR{ID: uint64(1000 + i), SG: SG(y.MR, i*128, 128)}
	}
	PostRecv(t, y.QP, recvs...)
	wrs := make([]verbs.SendWR, chainLen)
	for i := range wrs {
		wrs[i] = udWR(x, ah, y, uint64(i), verbs.OpSendWithImm, uint32(0x100+i), 0)
		wrs[i].Flags = 0
	}
	wrs[chainLen-1].Flags = verbs.Signaled
	PostSend(t, x.QP, wrs...)

	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), chainLen-1, verbs.WCSend)
	rwcs, _ := PollBatched(t, y.RecvCQ, chainLen, 16, DefaultTimeout)
	for i, wc := range rwcs {
		checkUDRecv(t, wc, uint64(1000+i), x, y, 0, true, uint32(0x100+i))
	}
	ExpectEmpty(t, x.SendCQ, "unsignaled sends")
}

// testUDChainSigAll: with SigAll every WR of a chain completes, in order,
// and the completions come 16 per Poll call.
func testUDChainSigAll(t *testing.T, a, b verbs.Device) {
	needWRs(t, a, chainLen)
	needWRs(t, b, chainLen)
	x := NewEndAttr(t, a, verbs.QPInitAttr{Type: verbs.UD, SigAll: true})
	y := NewEnd(t, b, verbs.UD)
	BringUp(t, x)
	BringUp(t, y)
	ah := AH(t, x, y.QP.Address())
	recvs := make([]verbs.RecvWR, chainLen)
	wrs := make([]verbs.SendWR, chainLen)
	for i := range wrs {
		recvs[i] = verbs.RecvWR{ID: uint64(1000 + i), SG: SG(y.MR, i*128, 128)}
		copy(x.MR.Bytes()[i*16:], Pattern(16, byte(i)))
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, SG: SG(x.MR, i*16, 16),
			AH: ah, RemoteQPN: y.QP.QPN(), RemoteQKey: verbs.DefaultQKey}
	}
	PostRecv(t, y.QP, recvs...)
	PostSend(t, x.QP, wrs...)
	swcs, _ := PollBatched(t, x.SendCQ, chainLen, 16, DefaultTimeout)
	for i, wc := range swcs {
		ExpectWC(t, wc, uint64(i), verbs.WCSend)
	}
	rwcs, _ := PollBatched(t, y.RecvCQ, chainLen, 16, DefaultTimeout)
	for i, wc := range rwcs {
		checkUDRecv(t, wc, uint64(1000+i), x, y, 16, false, 0)
		off := i*128 + verbs.GRHLen
		checkBytes(t, "chained payload", y.MR.Bytes()[off:off+16], Pattern(16, byte(i)))
	}
}

// testUDChainMixed posts one chain to two receivers that interleaves
// header-only SEND_WITH_IMMs with SENDs that carry a payload, no
// immediate or the solicited flag, and receives some of them into RECVs
// whose first SGE is shorter than the GRH. Every message must arrive
// whole, in order, at the QP it was sent to, with its own immediate and a
// GRH, whatever path the provider takes for each.
func testUDChainMixed(t *testing.T, a, b verbs.Device) {
	needWRs(t, a, chainLen)
	needWRs(t, b, chainLen)
	x := NewEnd(t, a, verbs.UD)
	y, z := NewEnd(t, b, verbs.UD), NewEnd(t, b, verbs.UD)
	for _, e := range []*End{x, y, z} {
		BringUp(t, e)
	}
	ahs := []verbs.AH{AH(t, x, y.QP.Address()), AH(t, x, z.QP.Address())}
	to := []*End{y, z}
	const slot = 128
	type msg struct {
		n       int
		withImm bool
		imm     uint32
	}
	var want [2][]msg
	wrs := make([]verbs.SendWR, chainLen)
	for i := range wrs {
		d := i / 3 % 2 // runs of three to one receiver, then the other
		m := msg{n: 0, withImm: true, imm: uint32(0x5000 + i)}
		switch i % 7 {
		case 2:
			m.n = 8 + i // a payload
		case 4:
			m.withImm = false
		}
		op := verbs.OpSend
		if m.withImm {
			op = verbs.OpSendWithImm
		}
		copy(x.MR.Bytes()[i*64:], Pattern(m.n, byte(i)))
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: op, SG: SG(x.MR, i*64, m.n), Imm: m.imm,
			AH: ahs[d], RemoteQPN: to[d].QP.QPN(), RemoteQKey: verbs.DefaultQKey}
		if i%11 == 5 {
			wrs[i].Flags |= verbs.Solicited
		}
		if !m.withImm {
			m.imm = 0
		}
		want[d] = append(want[d], m)
	}
	wrs[chainLen-1].Flags |= verbs.Signaled
	for d, e := range to {
		recvs := make([]verbs.RecvWR, len(want[d]))
		for i := range recvs {
			recvs[i] = verbs.RecvWR{ID: uint64(i), SG: SG(e.MR, i*slot, slot)}
			if i%4 == 1 {
				// The GRH straddles two SGEs.
				recvs[i].SG = []verbs.SGE{SGE(e.MR, i*slot, 16), SGE(e.MR, i*slot+16, slot-16)}
			}
		}
		Fill(e.MR.Bytes()[:len(recvs)*slot], 0xee)
		PostRecv(t, e.QP, recvs...)
	}
	PostSend(t, x.QP, wrs...)
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), chainLen-1, verbs.WCSend)
	for d, e := range to {
		wcs, _ := PollBatched(t, e.RecvCQ, len(want[d]), 16, DefaultTimeout)
		for i, wc := range wcs {
			m := want[d][i]
			checkUDRecv(t, wc, uint64(i), x, e, m.n, m.withImm, m.imm)
			buf := e.MR.Bytes()[i*slot : (i+1)*slot]
			checkGRH(t, buf, x.QP.Address(), e.QP.Address())
			if m.n > 0 {
				checkBytes(t, "payload after the GRH", buf[verbs.GRHLen:verbs.GRHLen+m.n], Pattern(m.n, byte(wcs[i].Imm-0x5000)))
			}
			checkUntouched(t, "receive buffer after the message", buf[verbs.GRHLen+m.n:], 0xee)
		}
		ExpectEmpty(t, e.RecvCQ, "after the mixed chain")
	}
}
