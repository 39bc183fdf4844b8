package verbstest

import (
	"encoding/binary"
	"testing"

	"github.com/seqd/seqd/verbs"
)

// bigLen is larger than MTU1024, so it takes several packets.
const bigLen = 3000

func ucTests() []test {
	return []test{
		{"UC/Send", func(t *testing.T, a, b verbs.Device) { testConnSend(t, a, b, verbs.UC, verbs.OpSendWithImm, bigLen) }},
		{"UC/Write", func(t *testing.T, a, b verbs.Device) { testWrite(t, a, b, verbs.UC) }},
		{"UC/WriteWithImm", func(t *testing.T, a, b verbs.Device) { testWriteWithImm(t, a, b, verbs.UC, bigLen) }},
		{"UC/WriteWithImmHeaderOnly", func(t *testing.T, a, b verbs.Device) { testWriteWithImm(t, a, b, verbs.UC, 0) }},
		{"UC/BadRKey", func(t *testing.T, a, b verbs.Device) { testUCBadWrite(t, a, b, false) }},
		{"UC/OutOfBounds", func(t *testing.T, a, b verbs.Device) { testUCBadWrite(t, a, b, true) }},
	}
}

func rcTests() []test {
	tests := []test{
		{"RC/Send/Payload", func(t *testing.T, a, b verbs.Device) { testConnSend(t, a, b, verbs.RC, verbs.OpSend, 100) }},
		{"RC/Send/ImmMultiPacket", func(t *testing.T, a, b verbs.Device) { testConnSend(t, a, b, verbs.RC, verbs.OpSendWithImm, bigLen) }},
		{"RC/Send/HeaderOnlyImm", func(t *testing.T, a, b verbs.Device) { testConnSend(t, a, b, verbs.RC, verbs.OpSendWithImm, 0) }},
		{"RC/Write", func(t *testing.T, a, b verbs.Device) { testWrite(t, a, b, verbs.RC) }},
		{"RC/WriteWithImm", func(t *testing.T, a, b verbs.Device) { testWriteWithImm(t, a, b, verbs.RC, bigLen) }},
		{"RC/Read/Small", func(t *testing.T, a, b verbs.Device) { testRead(t, a, b, 8) }},
		{"RC/Read/MultiPacket", func(t *testing.T, a, b verbs.Device) { testRead(t, a, b, bigLen) }},
		{"RC/FetchAdd", testFetchAdd},
		{"RC/CmpSwap", testCmpSwap},
		{"RC/Chain", testRCChain},
		{"RC/MixedChain", testRCMixedChain},
		{"RC/RetryExceeded", testRCRetryExceeded},
	}
	for _, c := range accessCases() {
		tests = append(tests, test{"RC/AccessErr/" + c.name, func(t *testing.T, a, b verbs.Device) { testAccessErr(t, a, b, c) }})
	}
	return tests
}

// testConnSend sends n bytes over a connected pair into a posted RECV.
func testConnSend(t *testing.T, a, b verbs.Device, typ verbs.QPType, op verbs.Opcode, n int) {
	x, y := ConnectPair(t, a, b, typ, verbs.MTU1024)
	rbuf := y.MR.Bytes()[:4096]
	Fill(rbuf, 0xee)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 7, SG: SG(y.MR, 0, len(rbuf))})
	p := Pattern(n, 1)
	copy(x.MR.Bytes(), p)
	const imm = 0x5e4d0001
	PostSend(t, x.QP, verbs.SendWR{ID: 1, Opcode: op, Flags: verbs.Signaled, SG: SG(x.MR, 0, n), Imm: imm})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 1, verbs.WCSend)
	wc := PollOne(t, y.RecvCQ, DefaultTimeout)
	ExpectWC(t, wc, 7, verbs.WCRecv)
	if wc.ByteLen != uint32(n) {
		t.Errorf("%v receive ByteLen %d, want %d (no GRH on connected QPs)", typ, wc.ByteLen, n)
	}
	withImm := op == verbs.OpSendWithImm
	if got := wc.Flags&verbs.WCWithImm != 0; got != withImm {
		t.Errorf("%v receive WCWithImm is %v, want %v: %s", typ, got, withImm, FormatWC(wc))
	} else if withImm && wc.Imm != imm {
		t.Errorf("%v receive Imm %#x, want %#x", typ, wc.Imm, imm)
	}
	if wc.QPN != y.QP.QPN() {
		t.Errorf("%v receive QPN %v, want %v", typ, wc.QPN, y.QP.QPN())
	}
	checkBytes(t, "received payload", rbuf[:n], p)
	checkUntouched(t, "receive buffer after the payload", rbuf[n:], 0xee)
}

// writeBarrier posts an 8-byte RDMA_WRITE_WITH_IMM from x to the end of
// y's MR and waits until it consumes y's RECV recvID, which must already
// be posted: on a connected QP, everything x sent before has then been
// handled by y.
func writeBarrier(t *testing.T, x, y *End, recvID uint64) {
	t.Helper()
	const imm = 0xba771e55
	PostSend(t, x.QP, verbs.SendWR{ID: 900, Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.Signaled,
		SG: SG(x.MR, MRLen-8, 8), Imm: imm, RemoteAddr: y.MR.Addr() + MRLen - 8, RKey: y.MR.RKey()})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 900, verbs.WCRDMAWrite)
	wc := PollOne(t, y.RecvCQ, DefaultTimeout)
	ExpectWC(t, wc, recvID, verbs.WCRecvRDMAWithImm)
	if wc.Flags&verbs.WCWithImm == 0 || wc.Imm != imm || wc.ByteLen != 8 {
		t.Errorf("RDMA_WRITE_WITH_IMM completion %s, want WCWithImm, imm %#x, 8 bytes", FormatWC(wc), uint32(imm))
	}
}

// testWrite writes bigLen bytes at an offset of the remote MR; a later
// RDMA_WRITE_WITH_IMM proves the plain write consumed no RECV.
func testWrite(t *testing.T, a, b verbs.Device, typ verbs.QPType) {
	x, y := ConnectPair(t, a, b, typ, verbs.MTU1024)
	const off = 100
	Fill(y.MR.Bytes()[:8192], 0xee)
	p := Pattern(bigLen, 2)
	copy(x.MR.Bytes(), p)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 50})
	PostSend(t, x.QP, verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled,
		SG: SG(x.MR, 0, bigLen), RemoteAddr: y.MR.Addr() + off, RKey: y.MR.RKey()})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 1, verbs.WCRDMAWrite)
	writeBarrier(t, x, y, 50)
	buf := y.MR.Bytes()
	checkBytes(t, "written bytes", buf[off:off+bigLen], p)
	checkUntouched(t, "before the write", buf[:off], 0xee)
	checkUntouched(t, "after the write", buf[off+bigLen:8192], 0xee)
}

// testWriteWithImm writes n bytes with an immediate that consumes a RECV
// posted with no buffers.
func testWriteWithImm(t *testing.T, a, b verbs.Device, typ verbs.QPType, n int) {
	x, y := ConnectPair(t, a, b, typ, verbs.MTU1024)
	const off, imm = 500, 0xabcdef01
	Fill(y.MR.Bytes()[:8192], 0xee)
	p := Pattern(n, 3)
	copy(x.MR.Bytes(), p)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 3})
	PostSend(t, x.QP, verbs.SendWR{ID: 4, Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.Signaled,
		SG: SG(x.MR, 0, n), Imm: imm, RemoteAddr: y.MR.Addr() + off, RKey: y.MR.RKey()})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 4, verbs.WCRDMAWrite)
	wc := PollOne(t, y.RecvCQ, DefaultTimeout)
	ExpectWC(t, wc, 3, verbs.WCRecvRDMAWithImm)
	if wc.Flags&verbs.WCWithImm == 0 || wc.Imm != imm {
		t.Errorf("RDMA_WRITE_WITH_IMM receive %s, want WCWithImm and imm %#x", FormatWC(wc), uint32(imm))
	}
	if wc.ByteLen != uint32(n) {
		t.Errorf("RDMA_WRITE_WITH_IMM receive ByteLen %d, want the %d bytes written", wc.ByteLen, n)
	}
	if wc.QPN != y.QP.QPN() {
		t.Errorf("RDMA_WRITE_WITH_IMM receive QPN %v, want %v", wc.QPN, y.QP.QPN())
	}
	buf := y.MR.Bytes()
	checkBytes(t, "written bytes", buf[off:off+n], p)
	checkUntouched(t, "before the write", buf[:off], 0xee)
	checkUntouched(t, "after the write", buf[off+n:8192], 0xee)
}

// testUCBadWrite: a UC write with a bad R_Key or out of the MR's bounds
// lands nowhere, and the QP keeps working.
func testUCBadWrite(t *testing.T, a, b verbs.Device, outOfBounds bool) {
	x, y := ConnectPair(t, a, b, verbs.UC, verbs.MTU1024)
	buf := y.MR.Bytes()
	Fill(buf, 0xee)
	copy(x.MR.Bytes(), Pattern(64, 7))
	wr := verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SG: SG(x.MR, 0, 64),
		RemoteAddr: y.MR.Addr(), RKey: y.MR.RKey() ^ 0x5a5a5a5a}
	if outOfBounds {
		wr.RemoteAddr, wr.RKey = y.MR.Addr()+MRLen-32, y.MR.RKey()
	}
	base, counted := Counter(b, verbs.CounterDropRKey)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 60})
	PostSend(t, x.QP, wr)
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 1, verbs.WCRDMAWrite) // UC completes locally
	writeBarrier(t, x, y, 60)
	checkUntouched(t, "remote MR after a refused write", buf[:MRLen-8], 0xee)
	if counted {
		WaitCounter(t, b, verbs.CounterDropRKey, base+1, DefaultTimeout)
	}
}

func testRead(t *testing.T, a, b verbs.Device, n int) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	const loff, roff = 64, 200
	lbuf := x.MR.Bytes()[:8192]
	Fill(lbuf, 0xee)
	p := Pattern(n, 4)
	copy(y.MR.Bytes()[roff:], p)
	PostSend(t, x.QP, verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
		SG: SG(x.MR, loff, n), RemoteAddr: y.MR.Addr() + roff, RKey: y.MR.RKey()})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 1, verbs.WCRDMARead)
	checkBytes(t, "read bytes", lbuf[loff:loff+n], p)
	checkUntouched(t, "before the read buffer", lbuf[:loff], 0xee)
	checkUntouched(t, "after the read buffer", lbuf[loff+n:], 0xee)
	ExpectEmpty(t, y.RecvCQ, "responder of a READ")
}

// atomicOp posts one signaled atomic from x on the 8 bytes at roff of y's
// MR, the original value landing at loff of x's MR, and waits for it.
func atomicOp(t *testing.T, x, y *End, id uint64, op verbs.Opcode, loff, roff int, cmpAdd, swap uint64) {
	t.Helper()
	want := verbs.WCFetchAdd
	if op == verbs.OpAtomicCmpSwap {
		want = verbs.WCCompSwap
	}
	PostSend(t, x.QP, verbs.SendWR{ID: id, Opcode: op, Flags: verbs.Signaled, SG: SG(x.MR, loff, 8),
		RemoteAddr: y.MR.Addr() + uint64(roff), RKey: y.MR.RKey(), CompareAdd: cmpAdd, Swap: swap})
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), id, want)
}

// atomicOrder runs op on a zero word at roff (adding 1, or swapping 0 for
// 1) and returns the byte order in which the provider's atomics read and
// write memory: the API leaves it to the provider, so the suite learns it,
// checks it against the responder's DeviceAttr.AtomicBigEndian, and then
// holds the provider to it.
func atomicOrder(t *testing.T, x, y *End, op verbs.Opcode, roff int) binary.ByteOrder {
	t.Helper()
	if (y.MR.Addr()+uint64(roff))%8 != 0 {
		t.Fatalf("MR address %#x is not 8-byte aligned", y.MR.Addr())
	}
	rem := y.MR.Bytes()[roff : roff+8]
	Fill(rem, 0)
	Fill(x.MR.Bytes()[:8], 0xee)
	if op == verbs.OpAtomicCmpSwap {
		atomicOp(t, x, y, 1, op, 0, roff, 0, 1)
	} else {
		atomicOp(t, x, y, 1, op, 0, roff, 1, 0)
	}
	checkBytes(t, "original value of a zero word", x.MR.Bytes()[:8], make([]byte, 8))
	var o binary.ByteOrder
	switch {
	case binary.BigEndian.Uint64(rem) == 1:
		t.Logf("%v: atomics use big-endian memory", op)
		o = binary.BigEndian
	case binary.LittleEndian.Uint64(rem) == 1:
		t.Logf("%v: atomics use little-endian memory", op)
		o = binary.LittleEndian
	default:
		t.Fatalf("%v of 1 on a zero word left % x", op, rem)
	}
	// Code that shares an atomic word with the CPU (the atomics mode)
	// trusts the responder's attribute: it must say what happened.
	if attr := y.Dev.Attr().AtomicBigEndian; attr != (o == binary.BigEndian) {
		t.Errorf("%v: the responder's DeviceAttr.AtomicBigEndian is %v, but its atomics used %v memory", op, attr, o)
	}
	return o
}

func testFetchAdd(t *testing.T, a, b verbs.Device) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	const roff = 64
	o := atomicOrder(t, x, y, verbs.OpAtomicFetchAdd, roff)
	rem, loc := y.MR.Bytes()[roff:roff+8], x.MR.Bytes()
	o.PutUint64(rem, 0xffffffff)
	atomicOp(t, x, y, 2, verbs.OpAtomicFetchAdd, 8, roff, 0x100000001, 0)
	if got := o.Uint64(loc[8:16]); got != 0xffffffff {
		t.Errorf("FETCH_AND_ADD returned %#x, want the original %#x", got, 0xffffffff)
	}
	if got := o.Uint64(rem); got != 0x200000000 {
		t.Errorf("after FETCH_AND_ADD memory holds %#x, want %#x", got, 0x200000000)
	}

	// A chain of adds: each sees the result of the one before.
	const n = 10
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(10 + i), Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled,
			SG: SG(x.MR, 64+8*i, 8), RemoteAddr: y.MR.Addr() + roff, RKey: y.MR.RKey(), CompareAdd: 1}
	}
	PostSend(t, x.QP, wrs...)
	for i, wc := range PollN(t, x.SendCQ, n, DefaultTimeout) {
		ExpectWC(t, wc, uint64(10+i), verbs.WCFetchAdd)
		if got, want := o.Uint64(loc[64+8*i:]), uint64(0x200000000+i); got != want {
			t.Errorf("chained FETCH_AND_ADD %d returned %#x, want %#x", i, got, want)
		}
	}
	if got := o.Uint64(rem); got != 0x200000000+n {
		t.Errorf("after %d more adds memory holds %#x, want %#x (duplicates applied twice?)", n, got, 0x200000000+n)
	}
}

func testCmpSwap(t *testing.T, a, b verbs.Device) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	const roff = 128
	const v, w, z = 0x1122334455667788, 0x8877665544332211, 0x0123456789abcdef
	o := atomicOrder(t, x, y, verbs.OpAtomicCmpSwap, roff)
	rem, loc := y.MR.Bytes()[roff:roff+8], x.MR.Bytes()
	o.PutUint64(rem, v)
	atomicOp(t, x, y, 2, verbs.OpAtomicCmpSwap, 8, roff, v, w)
	if got := o.Uint64(loc[8:16]); got != v {
		t.Errorf("successful CMP_AND_SWP returned %#x, want the original %#x", got, uint64(v))
	}
	if got := o.Uint64(rem); got != w {
		t.Errorf("after a successful CMP_AND_SWP memory holds %#x, want %#x", got, uint64(w))
	}
	atomicOp(t, x, y, 3, verbs.OpAtomicCmpSwap, 16, roff, v, z)
	if got := o.Uint64(loc[16:24]); got != w {
		t.Errorf("failed CMP_AND_SWP returned %#x, want the current %#x", got, uint64(w))
	}
	if got := o.Uint64(rem); got != w {
		t.Errorf("a failed CMP_AND_SWP changed memory to %#x, want it left at %#x", got, uint64(w))
	}
}

// testRCChain posts 32 SENDs in one chain with every fourth signaled.
func testRCChain(t *testing.T, a, b verbs.Device) {
	needWRs(t, a, chainLen)
	needWRs(t, b, chainLen)
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	recvs := make([]verbs.RecvWR, chainLen)
	wrs := make([]verbs.SendWR, chainLen)
	for i := range wrs {
		recvs[i] = verbs.RecvWR{ID: uint64(1000 + i), SG: SG(y.MR, i*128, 128)}
		copy(x.MR.Bytes()[i*64:], Pattern(64, byte(i)))
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, SG: SG(x.MR, i*64, 64), Imm: uint32(i)}
		if i%4 == 3 {
			wrs[i].Flags = verbs.Signaled
		}
	}
	PostRecv(t, y.QP, recvs...)
	PostSend(t, x.QP, wrs...)
	for i, wc := range PollN(t, x.SendCQ, chainLen/4, DefaultTimeout) {
		ExpectWC(t, wc, uint64(4*i+3), verbs.WCSend)
	}
	rwcs, _ := PollBatched(t, y.RecvCQ, chainLen, 16, DefaultTimeout)
	for i, wc := range rwcs {
		ExpectWC(t, wc, uint64(1000+i), verbs.WCRecv)
		if wc.Flags&verbs.WCWithImm == 0 || wc.Imm != uint32(i) || wc.ByteLen != 64 {
			t.Errorf("receive %d: %s, want imm %d and 64 bytes", i, FormatWC(wc), i)
		}
		checkBytes(t, "chained payload", y.MR.Bytes()[i*128:i*128+64], Pattern(64, byte(i)))
	}
	ExpectEmpty(t, x.SendCQ, "unsignaled sends")
}

// testRCMixedChain: WRITE, READ of what it wrote, FETCH_AND_ADD and SEND
// in one chain complete in order, and the READ sees the WRITE.
func testRCMixedChain(t *testing.T, a, b verbs.Device) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	const n = 2000
	p := Pattern(n, 6)
	copy(x.MR.Bytes(), p)
	Fill(x.MR.Bytes()[4096:4096+n], 0xee)
	Fill(y.MR.Bytes()[:8], 0)
	PostRecv(t, y.QP, verbs.RecvWR{ID: 77, SG: SG(y.MR, 8192, 256)})
	PostSend(t, x.QP,
		verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SG: SG(x.MR, 0, n),
			RemoteAddr: y.MR.Addr() + 1024, RKey: y.MR.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.Signaled, SG: SG(x.MR, 4096, n),
			RemoteAddr: y.MR.Addr() + 1024, RKey: y.MR.RKey()},
		verbs.SendWR{ID: 3, Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled, SG: SG(x.MR, 8192, 8),
			RemoteAddr: y.MR.Addr(), RKey: y.MR.RKey(), CompareAdd: 7},
		verbs.SendWR{ID: 4, Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled, SG: SG(x.MR, 0, 16), Imm: 44},
	)
	want := []verbs.WCOpcode{verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCFetchAdd, verbs.WCSend}
	for i, wc := range PollN(t, x.SendCQ, len(want), DefaultTimeout) {
		ExpectWC(t, wc, uint64(i+1), want[i])
	}
	checkBytes(t, "READ after WRITE", x.MR.Bytes()[4096:4096+n], p)
	checkBytes(t, "FETCH_AND_ADD original", x.MR.Bytes()[8192:8200], make([]byte, 8))
	wc := PollOne(t, y.RecvCQ, DefaultTimeout)
	ExpectWC(t, wc, 77, verbs.WCRecv)
	if wc.Imm != 44 || wc.ByteLen != 16 {
		t.Errorf("SEND at the end of the chain: %s, want imm 44 and 16 bytes", FormatWC(wc))
	}
}

// accessCase is one R_Key violation on an RC QP.
type accessCase struct {
	name string
	// wr builds the offending request; extra is a second MR on y's PD with
	// only local write and remote read access.
	wr func(x, y *End, extra verbs.MR) verbs.SendWR
}

func accessCases() []accessCase {
	write := func(rkey uint32, addr uint64, x *End) verbs.SendWR {
		return verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SG: SG(x.MR, 0, 64), RemoteAddr: addr, RKey: rkey}
	}
	read := func(rkey uint32, addr uint64, x *End) verbs.SendWR {
		return verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.Signaled, SG: SG(x.MR, 0, 64), RemoteAddr: addr, RKey: rkey}
	}
	return []accessCase{
		{"WriteBadRKey", func(x, y *End, _ verbs.MR) verbs.SendWR {
			return write(y.MR.RKey()^0x5a5a5a5a, y.MR.Addr(), x)
		}},
		{"WriteOutOfBounds", func(x, y *End, _ verbs.MR) verbs.SendWR {
			return write(y.MR.RKey(), y.MR.Addr()+MRLen-32, x)
		}},
		{"WriteBelowMR", func(x, y *End, _ verbs.MR) verbs.SendWR {
			return write(y.MR.RKey(), y.MR.Addr()-64, x)
		}},
		{"WriteNoAccess", func(x, y *End, ro verbs.MR) verbs.SendWR {
			return write(ro.RKey(), ro.Addr(), x)
		}},
		{"ReadBadRKey", func(x, y *End, _ verbs.MR) verbs.SendWR {
			return read(y.MR.RKey()^0x5a5a5a5a, y.MR.Addr(), x)
		}},
		{"ReadOutOfBounds", func(x, y *End, _ verbs.MR) verbs.SendWR {
			return read(y.MR.RKey(), y.MR.Addr()+MRLen-32, x)
		}},
		{"AtomicBadRKey", func(x, y *End, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{ID: 1, Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled, SG: SG(x.MR, 0, 8),
				RemoteAddr: y.MR.Addr(), RKey: y.MR.RKey() ^ 0x5a5a5a5a, CompareAdd: 1}
		}},
		{"AtomicNoAccess", func(x, y *End, ro verbs.MR) verbs.SendWR {
			return verbs.SendWR{ID: 1, Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled, SG: SG(x.MR, 0, 8),
				RemoteAddr: ro.Addr(), RKey: ro.RKey(), CompareAdd: 1}
		}},
	}
}

// testAccessErr: an RC request that violates the responder's R_Key
// checks completes with WCRemAccessErr and changes no remote memory.
func testAccessErr(t *testing.T, a, b verbs.Device, c accessCase) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	ro, err := y.PD.RegMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	CloseLater(t, "MR", ro)
	Fill(y.MR.Bytes(), 0xee)
	Fill(ro.Bytes(), 0xee)
	copy(x.MR.Bytes(), Pattern(64, 8))
	PostSend(t, x.QP, c.wr(x, y, ro))
	wc := PollOne(t, x.SendCQ, DefaultTimeout)
	if wc.ID != 1 || wc.Status != verbs.WCRemAccessErr {
		t.Errorf("completion %s, want id=1 with status %v", FormatWC(wc), verbs.WCRemAccessErr)
	}
	checkUntouched(t, "remote MR", y.MR.Bytes(), 0xee)
	checkUntouched(t, "read-only MR", ro.Bytes(), 0xee)
	ExpectEmpty(t, y.RecvCQ, "responder")
}

// testRCRetryExceeded: requests to a responder that never answers (its QP
// is in ERR, which drops everything) complete with WCRetryExcErr after
// the retries, the rest of the send queue is flushed, and the requester
// is in ERR.
func testRCRetryExceeded(t *testing.T, a, b verbs.Device) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	must(t, y.QP.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
	Fill(y.MR.Bytes(), 0xee)
	PostSend(t, x.QP,
		verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SG: SG(x.MR, 0, 64),
			RemoteAddr: y.MR.Addr(), RKey: y.MR.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SG: SG(x.MR, 0, 64),
			RemoteAddr: y.MR.Addr() + 64, RKey: y.MR.RKey()})
	wcs := PollN(t, x.SendCQ, 2, DefaultTimeout)
	if wcs[0].ID != 1 || wcs[0].Status != verbs.WCRetryExcErr {
		t.Errorf("first WR: %s, want id=1 with status %v", FormatWC(wcs[0]), verbs.WCRetryExcErr)
	}
	if wcs[1].ID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
		t.Errorf("second WR: %s, want id=2 with status %v", FormatWC(wcs[1]), verbs.WCWRFlushErr)
	}
	expectState(t, x.QP, verbs.StateErr)
	checkUntouched(t, "memory of a responder in ERR", y.MR.Bytes(), 0xee)
}
