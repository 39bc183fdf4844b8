package wire

import (
	"fmt"

	"github.com/seqd/seqd/spec"
)

// answerERPC handles one eRPC answer packet, segment k of a datagram
// from src:port, and returns its value (0 for none). An answer is the
// server's only with the flow's session's answer Q_Key, from an answer
// QP of the grant, naming the flow's session, with a valid ICRC; it
// then matches (slot, request number) of a request in flight.
func (g *Gen) answerERPC(now int64, b []byte, k int, src [4]byte, port uint16, measure bool) uint64 {
	var a answer
	if !parseERPCAnswer(b, &a) {
		g.st.Malformed++
		return 0
	}
	fi := int(a.destQP - QPNBase)
	if a.destQP < QPNBase || fi >= len(g.eflow) {
		g.st.Malformed++
		return 0
	}
	if !g.okFrom(fi, a.qkey, a.srcQP) {
		g.st.Forged++
		return 0
	}
	if !g.cfg.NoICRC && !g.rcv[fi].icrcOK(b, k, src, port) {
		g.st.BadICRC++
		return 0
	}
	h, v, err := spec.DecodeERPC(a.payload)
	if err != nil || h.Op != spec.ERPCOpAnswer || h.Count != 1 {
		g.st.Malformed++
		return 0
	}
	f := g.eflow[fi]
	if h.Session != f.Session {
		g.st.Forged++ // another session's answer, misrouted
		return 0
	}
	s, m := f.Answer(h.Slot, h.ReqNum, v)
	switch m {
	case ERPCDuplicate:
		g.st.DupAnswers++
		return 0
	case ERPCReanswered:
		g.st.Reanswered++
		g.example(fmt.Sprintf("%v: flow %d slot %d request %d answered again with %d", "reanswered", fi, h.Slot, h.ReqNum, v))
		return 0
	case ERPCUnmatched:
		g.st.Stale++
		return 0
	}
	g.out--
	g.push(int32(fi))
	if !g.checkValue(fi, s, v) {
		return 0
	}
	f.Accept(v)
	g.st.Answers++
	if measure {
		g.st.Measured++
		g.hist.RecordValue(max(now-s.At, 1))
	}
	return v
}
