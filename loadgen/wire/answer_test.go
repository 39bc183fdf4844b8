//go:build linux

package wire

import (
	"net/netip"
	"testing"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs/rocev2"
)

var (
	testSrv  = [4]byte{127, 0, 0, 1}
	testPort = uint16(40000)
	testAnsQ = uint32(0x1234)
	testAnsP = uint32(77)
)

// testGen is a generator with two flows pointed at a pretend seqd, for
// feeding it answers by hand.
func testGen(t testing.TB) *Gen {
	t.Helper()
	g, err := New(Config{Flows: 2, Window: 8, Keep: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	tg := Target{Kind: Seqd, AnswerQKey: testAnsQ, AnswerQPNs: []uint32{testAnsP}}
	for range 2 {
		tg.Flows = append(tg.Flows, FlowTarget{Server: netip.AddrPortFrom(netip.AddrFrom4(testSrv), 4791), QPN: 9, QKey: 0x55})
	}
	if err := g.SetTarget(tg); err != nil {
		t.Fatal(err)
	}
	return g
}

// ans builds the answer packet the server would send flow fi: a
// confirmation of high (full: the whole value) with a valid ICRC for IPv4
// ID id.
func ans(g *Gen, fi int, tag spec.Tag, v uint64, full bool, qkey, from uint32, id uint16) []byte {
	p := rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: rocev2.DefaultPKey, DestQP: QPNBase + uint32(fi),
		QKey: qkey, SrcQP: from, Imm: uint32(spec.AnswerImm(tag, v))}
	if full {
		p.Payload = make([]byte, spec.FullLen)
		spec.PutFull(p.Payload, v)
	}
	b := make([]byte, p.Len())
	if _, err := p.Encode(b); err != nil {
		panic(err)
	}
	f := rocev2.Flow{Src: testSrv, Dst: g.src[fi], SrcPort: testPort, DstPort: g.port, FlagsFrag: 0x4000, ID: id}
	rocev2.PutICRC(&f, b)
	return b
}

// sendOne takes a tag on flow fi as a send at now would.
func sendOne(t testing.TB, g *Gen, fi int, now int64) spec.Tag {
	t.Helper()
	tag, ok := g.flows[fi].Send(now, NoHigh, g.chk.Floor())
	if !ok {
		t.Fatal("send refused")
	}
	return tag
}

func TestAnswerChecks(t *testing.T) {
	g := testGen(t)
	feed := func(b []byte, k int) uint64 { return g.answer(100, b, k, testSrv, testPort, true) }

	tag := sendOne(t, g, 0, 10)
	good := ans(g, 0, tag, 1000, true, testAnsQ, testAnsP, 0)
	if v := feed(good, 0); v != 1000 || g.st.Answers != 1 {
		t.Fatalf("good answer: value %d, %+v", v, g.st)
	}
	// The same answer again: its tag is no longer outstanding.
	if feed(good, 0); g.st.Stale != 1 || g.st.Answers != 1 {
		t.Fatalf("duplicate answer not stale: %+v", g.st)
	}
	// An answer for a tag never sent.
	if feed(ans(g, 0, tag+5, 1001, true, testAnsQ, testAnsP, 0), 0); g.st.Stale != 2 {
		t.Fatalf("wrong tag not stale: %+v", g.st)
	}
	tag = sendOne(t, g, 0, 110)
	// Forged: another Q_Key, or not from the server's answer QPs.
	feed(ans(g, 0, tag, 1002, true, testAnsQ+1, testAnsP, 0), 0)
	feed(ans(g, 0, tag, 1002, true, testAnsQ, testAnsP+1, 0), 0)
	if g.st.Forged != 2 {
		t.Fatalf("forged answers not caught: %+v", g.st)
	}
	// A corrupt packet.
	bad := ans(g, 0, tag, 1002, true, testAnsQ, testAnsP, 0)
	bad[25] ^= 1
	if feed(bad, 0); g.st.BadICRC != 1 {
		t.Fatalf("bad ICRC not caught: %+v", g.st)
	}
	// Segment 3 of a GSO run carries IPv4 ID 3; an ID no segment index
	// explains is still accepted (rxe and NICs number otherwise).
	if v := feed(ans(g, 0, tag, 1002, true, testAnsQ, testAnsP, 3), 3); v != 1002 {
		t.Fatalf("segment 3: %d %+v", v, g.st)
	}
	tag = sendOne(t, g, 0, 120)
	if v := feed(ans(g, 0, tag, 1003, true, testAnsQ, testAnsP, 9), 0); v != 1003 {
		t.Fatalf("other ID: %d %+v", v, g.st)
	}
	// A value below one received before the request was sent: flow 1
	// never received anything, so it is a real-time violation.
	tag = sendOne(t, g, 1, 130)
	if feed(ans(g, 1, tag, 999, true, testAnsQ, testAnsP, 0), 0); g.st.RealTime != 1 {
		t.Fatalf("real-time violation not caught: %+v", g.st)
	}
	// On flow 0 it is its own regression.
	tag = sendOne(t, g, 0, 130)
	if feed(ans(g, 0, tag, 1003, true, testAnsQ, testAnsP, 0), 0); g.st.Regressions != 1 {
		t.Fatalf("flow regression not caught: %+v", g.st)
	}
	// A confirmation of a request sent without a guess is malformed.
	tag = sendOne(t, g, 0, 140)
	if feed(ans(g, 0, tag, 2000, false, testAnsQ, testAnsP, 0), 0); g.st.Malformed != 1 {
		t.Fatalf("confirmation of no guess not caught: %+v", g.st)
	}
	// An answer for a QPN that is no flow's.
	b := ans(g, 0, tag, 2001, true, testAnsQ, testAnsP, 0)
	b[7] = 0xff
	if feed(b, 0); g.st.Malformed != 2 {
		t.Fatalf("unknown flow not caught: %+v", g.st)
	}
	if g.st.Violations() != 2 || len(g.ex) != 2 {
		t.Fatalf("violations %d, examples %q", g.st.Violations(), g.ex)
	}
}

func TestAnswerConfirmation(t *testing.T) {
	g := testGen(t)
	high := uint64(5) << spec.LowBits
	tag, ok := g.flows[0].Send(10, high>>spec.LowBits, 0)
	if !ok {
		t.Fatal("send")
	}
	_ = tag
	// Send records the high part the guess came from (v >> LowBits).
	v := high | 77
	if got := g.answer(20, ans(g, 0, tag, v, false, testAnsQ, testAnsP, 0), 0, testSrv, testPort, true); got != v {
		t.Fatalf("confirmation completed to %d, want %d (%+v)", got, v, g.st)
	}
}

func TestAnswerDuplicateValue(t *testing.T) {
	g := testGen(t)
	t0 := sendOne(t, g, 0, 10)
	t1 := sendOne(t, g, 1, 10)
	g.answer(20, ans(g, 0, t0, 500, true, testAnsQ, testAnsP, 0), 0, testSrv, testPort, true)
	g.answer(20, ans(g, 1, t1, 500, true, testAnsQ, testAnsP, 0), 0, testSrv, testPort, true)
	if n, first := g.chk.Duplicates(); n != 1 || first != 500 {
		t.Fatalf("duplicate across flows: %d %d", n, first)
	}
}

func TestRequestWire(t *testing.T) {
	g := testGen(t)
	b := make([]byte, 3*reqLen)
	s := &g.snd[1]
	for k := range 3 {
		s.put(b[k*reqLen:], uint32(spec.MustRequestImm(spec.Tag(k), spec.Guess(42))), k)
	}
	for k := range 3 {
		pkt := b[k*reqLen : (k+1)*reqLen]
		var p rocev2.Packet
		if err := p.Decode(pkt); err != nil {
			t.Fatal(err)
		}
		if p.Opcode != rocev2.UDSendOnlyWithImm || p.DestQP != 9 || p.QKey != 0x55 || p.SrcQP != QPNBase+1 ||
			p.PSN != uint32(k) || spec.Imm(p.Imm).Tag() != spec.Tag(k) || p.PKey != rocev2.DefaultPKey {
			t.Fatalf("packet %d: %+v", k, p)
		}
		f := rocev2.Flow{Src: g.src[1], Dst: testSrv, SrcPort: g.port, DstPort: 4791, FlagsFrag: 0x4000, ID: uint16(k)}
		if !rocev2.VerifyICRC(&f, pkt) {
			t.Fatalf("packet %d: ICRC not valid for IPv4 ID %d", k, k)
		}
	}
}

// BenchmarkBuild is the generator's per-request send work.
func BenchmarkBuild(b *testing.B) {
	g := testGen(b)
	buf := make([]byte, maxSegs*reqLen)
	s := &g.snd[0]
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i & (maxSegs - 1)
		s.put(buf[k*reqLen:], uint32(i)&0xfff00000|42, k)
	}
}

// BenchmarkAnswer is the generator's per-answer receive work: parse,
// checks (answer QP, Q_Key, ICRC), tag match, value check.
func BenchmarkAnswer(b *testing.B) {
	g := testGen(b)
	f := g.flows[0]
	v := uint64(1000)
	pkts := make([][]byte, f.Tags())
	for i := 0; b.Loop(); i++ {
		if i&(1<<16-1) == 0 {
			g.chk.Reset()
		}
		tag, ok := f.Send(int64(i), NoHigh, g.chk.Floor())
		if !ok {
			b.Fatal("send refused")
		}
		v++
		p := pkts[tag]
		if p == nil {
			b.StopTimer()
			p = ans(g, 0, tag, v, true, testAnsQ, testAnsP, 0)
			pkts[tag] = p
			b.StartTimer()
		}
		// The value is in the payload and the immediate's low bits: patch
		// both (and the ICRC) without allocating.
		imm := uint32(spec.AnswerImm(tag, v))
		p[20], p[21], p[22], p[23] = byte(imm>>24), byte(imm>>16), byte(imm>>8), byte(imm)
		spec.PutFull(p[24:32], v)
		fl := rocev2.Flow{Src: testSrv, Dst: g.src[0], SrcPort: testPort, DstPort: g.port, FlagsFrag: 0x4000}
		rocev2.PutICRC(&fl, p)
		if g.answer(int64(i), p, 0, testSrv, testPort, true) != v {
			b.Fatalf("answer refused: %+v", g.st)
		}
	}
	b.ReportAllocs()
}
