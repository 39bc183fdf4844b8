//go:build linux

package wire

import (
	"net/netip"
	"testing"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs/rocev2"
)

// testERPCGen is a generator with two eRPC flows (sessions 7 and 8)
// pointed at a pretend seqd, for feeding it answers by hand.
func testERPCGen(t testing.TB) *Gen {
	t.Helper()
	g, err := New(Config{Flows: 2, Window: spec.ERPCSlots, Keep: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	tg := Target{Kind: ERPC, AnswerQKey: testAnsQ, AnswerQPNs: []uint32{testAnsP}}
	for i := range 2 {
		tg.Flows = append(tg.Flows, FlowTarget{Server: netip.AddrPortFrom(netip.AddrFrom4(testSrv), 4791), QPN: 9, QKey: 0x55,
			Session: uint64(7 + i)})
	}
	if err := g.SetTarget(tg); err != nil {
		t.Fatal(err)
	}
	return g
}

// erpcAns builds the answer packet the server would send flow fi for
// session's slot and request number rn, carrying v, with a valid ICRC
// for IPv4 ID 0.
func erpcAns(g *Gen, fi int, session uint64, slot int, rn, v uint64, qkey, from uint32) []byte {
	p := rocev2.Packet{Opcode: rocev2.UDSendOnly, PKey: rocev2.DefaultPKey, DestQP: QPNBase + uint32(fi),
		QKey: qkey, SrcQP: from, Payload: make([]byte, spec.ERPCAnswerLen)}
	if err := spec.PutERPCAnswer(p.Payload, spec.ERPCHeader{Op: spec.ERPCOpAnswer, Slot: slot, Count: 1, Session: session, ReqNum: rn}, v); err != nil {
		panic(err)
	}
	b := make([]byte, p.Len())
	if _, err := p.Encode(b); err != nil {
		panic(err)
	}
	f := rocev2.Flow{Src: testSrv, Dst: g.src[fi], SrcPort: testPort, DstPort: g.port, FlagsFrag: 0x4000}
	rocev2.PutICRC(&f, b)
	return b
}

// TestERPCRequestPacket: the generator's request is a UD SEND Only to
// the server QP with the session's Q_Key and the flow's QPN, carrying an
// eRPC request for one value under the slot's request number, with a
// valid ICRC.
func TestERPCRequestPacket(t *testing.T) {
	g := testERPCGen(t)
	slot, rn, ok := g.eflow[1].Send(0, 0)
	if !ok {
		t.Fatal("send refused")
	}
	b := make([]byte, erpcReqLen)
	g.esnd[1].put(b, slot, rn, 0)
	var p rocev2.Packet
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	if p.Opcode != rocev2.UDSendOnly || p.DestQP != 9 || p.QKey != 0x55 || p.SrcQP != QPNBase+1 {
		t.Fatalf("transport headers %+v", p)
	}
	h, _, err := spec.DecodeERPC(p.Payload)
	if err != nil || h != (spec.ERPCHeader{Op: spec.ERPCOpRequest, Slot: slot, Count: 1, Session: 8, ReqNum: rn}) {
		t.Fatalf("header %+v, %v", h, err)
	}
	f := rocev2.Flow{Src: g.src[1], Dst: testSrv, SrcPort: g.port, DstPort: 4791, FlagsFrag: 0x4000}
	if !rocev2.VerifyICRC(&f, b) {
		t.Fatal("bad ICRC")
	}
}

// TestERPCAnswerChecks: only the server's answer to a request in flight
// is accepted; forged (Q_Key, answer QP, another session's) and
// misrouted or stale answers are counted, not accepted, and a copy of
// an answer with another value is Reanswered.
func TestERPCAnswerChecks(t *testing.T) {
	g := testERPCGen(t)
	feed := func(b []byte) uint64 { return g.answer(100, b, 0, testSrv, testPort, true) }
	send := func(fi int) (int, uint64) {
		slot, rn, ok := g.eflow[fi].Send(10, g.chk.Floor())
		if !ok {
			t.Fatal("send refused")
		}
		g.out++
		return slot, rn
	}

	slot, rn := send(0)
	// Forged: another Q_Key, not from the server's answer QP, or naming
	// flow 1's session (misrouted to flow 0).
	feed(erpcAns(g, 0, 7, slot, rn, 1000, testAnsQ+1, testAnsP))
	feed(erpcAns(g, 0, 7, slot, rn, 1000, testAnsQ, testAnsP+1))
	feed(erpcAns(g, 0, 8, slot, rn, 1000, testAnsQ, testAnsP))
	if g.st.Forged != 3 || g.st.Answers != 0 {
		t.Fatalf("forged answers not caught: %+v", g.st)
	}
	// Flow 1's session's answer for the same slot and number, sent to
	// flow 1: nothing in flight there.
	if feed(erpcAns(g, 1, 8, slot, rn, 1000, testAnsQ, testAnsP)); g.st.Stale != 1 || g.st.Answers != 0 {
		t.Fatalf("answer to flow 1's idle slot not stale: %+v", g.st)
	}
	// Another request number, another slot.
	feed(erpcAns(g, 0, 7, slot, rn+1, 1000, testAnsQ, testAnsP))
	feed(erpcAns(g, 0, 7, slot+1, rn, 1000, testAnsQ, testAnsP))
	if g.st.Stale != 3 || g.st.Answers != 0 {
		t.Fatalf("wrong slot or request number not stale: %+v", g.st)
	}
	// A corrupt packet.
	bad := erpcAns(g, 0, 7, slot, rn, 1000, testAnsQ, testAnsP)
	bad[erpcHdrOff+spec.ERPCHeaderLen+7] ^= 1
	if feed(bad); g.st.BadICRC != 1 {
		t.Fatalf("bad ICRC not caught: %+v", g.st)
	}
	// A request's answer, with a bad eRPC header: malformed.
	bad = erpcAns(g, 0, 7, slot, rn, 1000, testAnsQ, testAnsP)
	bad[erpcHdrOff+1] = spec.ERPCOpRequest
	bad = bad[:len(bad)-rocev2.ICRCLen]
	bad = bad[:len(bad)-8] // a request's length: not an answer packet
	if feed(append(bad, 0, 0, 0, 0)); g.st.Malformed != 1 {
		t.Fatalf("request-shaped packet not malformed: %+v", g.st)
	}
	// The answer: accepted, its slot free again.
	good := erpcAns(g, 0, 7, slot, rn, 1000, testAnsQ, testAnsP)
	if v := feed(good); v != 1000 || g.st.Answers != 1 || g.eflow[0].Outstanding() != 0 {
		t.Fatalf("good answer: value %d, %+v", v, g.st)
	}
	// Its copy: counted, not accepted.
	if feed(good); g.st.DupAnswers != 1 || g.st.Answers != 1 {
		t.Fatalf("copy of the answer: %+v", g.st)
	}
	// A copy with another value: at-most-once broken.
	if feed(erpcAns(g, 0, 7, slot, rn, 1001, testAnsQ, testAnsP)); g.st.Reanswered != 1 || g.st.Answers != 1 || g.st.Violations() != 1 {
		t.Fatalf("reanswered not caught: %+v", g.st)
	}
	// The slot's next request carries the next request number; a value
	// not above one received before it was sent is a violation.
	slot2, rn2 := send(0)
	if slot2 != slot || rn2 != rn+1 {
		t.Fatalf("next request slot %d number %d, want %d %d", slot2, rn2, slot, rn+1)
	}
	if feed(erpcAns(g, 0, 7, slot2, rn2, 999, testAnsQ, testAnsP)); g.st.RealTime+g.st.Regressions != 1 {
		t.Fatalf("value below the floor not caught: %+v", g.st)
	}
	// A given-up request's late answer is stale.
	s3, rn3 := send(1)
	if n := g.eflow[1].Expire(10+int64(spec.MaxAnswerDelay), int64(spec.MaxAnswerDelay)); n != 1 {
		t.Fatalf("expired %d", n)
	}
	stale := g.st.Stale
	if feed(erpcAns(g, 1, 8, s3, rn3, 2000, testAnsQ, testAnsP)); g.st.Stale != stale+1 {
		t.Fatalf("late answer not stale: %+v", g.st)
	}
}

// TestERPCAnswerAllocs: sending a request and accepting its answer
// allocate nothing.
func TestERPCAnswerAllocs(t *testing.T) {
	g := testERPCGen(t)
	const runs = 200
	slot, rn0, _ := g.eflow[0].Send(10, g.chk.Floor())
	g.eflow[0].Expire(1<<40, 1) // given up: the next request is rn0+1 on the same slot
	pkts := make([][]byte, runs+1)
	for i := range pkts {
		pkts[i] = erpcAns(g, 0, 7, slot, rn0+1+uint64(i), 1000+uint64(i), testAnsQ, testAnsP)
	}
	out := make([]byte, erpcReqLen)
	i := 0
	if n := testing.AllocsPerRun(runs, func() {
		s, rn, ok := g.eflow[0].Send(1<<40, g.chk.Floor())
		if !ok || s != slot || rn != rn0+1+uint64(i) {
			panic("unexpected slot or request number")
		}
		g.out++
		g.esnd[0].put(out, s, rn, 0)
		if g.answer(1<<40, pkts[i], 0, testSrv, testPort, true) == 0 {
			panic("answer not accepted")
		}
		i++
	}); n != 0 {
		t.Fatalf("%v allocs per request and answer", n)
	}
	if g.st.Answers != runs+1 {
		t.Fatalf("%+v", g.st)
	}
}
