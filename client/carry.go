package client

import (
	"fmt"

	"github.com/seqd/seqd/verbs"
)

// The bookkeeping of the transports that pack several callers into one
// request and hand out one value each from its answer (fasst, erpc):
// where each engine ID waits, and the accepted answers whose values did
// not fit in a Poll's results yet.

// callRef is where an engine ID waits: QP qi, slot, position in the
// slot's request; qi is refFree when it is not in flight, refCarried
// when its answer was accepted and its value is in the carry.
type callRef struct{ qi, slot, idx int }

const (
	refFree    = -1
	refCarried = -2
)

// carried is an accepted answer whose values wait to be handed out.
type carried struct {
	calls []int // engine IDs in value order (-1: cancelled)
	next  int
	first uint64
	rng   bool // one caller's range: it gets first
}

// answerCarry is that bookkeeping. carry holds accepted answers in the
// order accepted; spare the call lists not in use (one per slot in all,
// so accepting swaps lists, allocating nothing).
type answerCarry struct {
	where       []callRef // by engine ID
	outstanding int
	carry       []carried
	spare       [][]int
}

// accept moves calls, the callers of a slot whose answer (values from
// first; a range's one caller gets first) was accepted, into the carry,
// and returns the empty list the slot takes instead.
func (c *answerCarry) accept(calls []int, first uint64, rng bool) []int {
	fresh := c.spare[len(c.spare)-1][:0]
	c.spare = c.spare[:len(c.spare)-1]
	for _, id := range calls {
		if id >= 0 {
			c.where[id].qi = refCarried
		}
	}
	c.carry = append(c.carry, carried{calls: calls, first: first, rng: rng})
	return fresh
}

// drainCarry moves values of accepted answers into res.
func (c *answerCarry) drainCarry(res []result) int {
	k := 0
	for len(c.carry) > 0 && k < len(res) {
		a := &c.carry[0]
		for ; a.next < len(a.calls) && k < len(res); a.next++ {
			id := a.calls[a.next]
			if id < 0 {
				continue // its caller gave up: the value is skipped
			}
			c.where[id].qi = refFree
			c.outstanding--
			v := a.first + uint64(a.next)
			if a.rng {
				v = a.first
			}
			res[k] = result{ID: id, Value: v}
			k++
		}
		if a.next < len(a.calls) {
			break
		}
		c.spare = append(c.spare, a.calls[:0])
		n := copy(c.carry, c.carry[1:])
		c.carry[n] = carried{}
		c.carry = c.carry[:n]
	}
	return k
}

// answerPayload checks a receive completion of a transport whose answers
// are UD SENDs without immediate into receive slots of slotLen bytes
// (fasst, erpc) and returns the answer's bytes in buf, or nil: a failed
// or malformed completion (counted malformed, but not a flushed one)
// or one from another sender than the server's answer QPs (forged).
// The caller re-posts the slot either way.
func answerPayload(wc *verbs.WC, buf []byte, slotLen int, from verbs.Senders, st *stats) []byte {
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.Flags&verbs.WCWithImm != 0 ||
		wc.ByteLen < verbs.GRHLen || int(wc.ByteLen) > slotLen {
		if wc.Status != verbs.WCWRFlushErr {
			st.malformed.Add(1)
		}
		return nil
	}
	if !from.Match(wc) {
		st.forged.Add(1)
		return nil
	}
	off := int(wc.ID)*slotLen + verbs.GRHLen
	return buf[off : off+int(wc.ByteLen)-verbs.GRHLen]
}

// answerRecvs is the receive side of those transports: n receive slots
// of slotLen bytes per QP in one registered region, completing on one
// CQ, and the work requests that post them again. Only the sender of
// answerFrom is taken (answerPayload).
type answerRecvs struct {
	recvCQ     verbs.CQ
	recvMR     verbs.MR
	recvN      int // slots per QP
	slotLen    int
	answerFrom verbs.Senders
	wcs        []verbs.WC
	recvWRs    []verbs.RecvWR
	recvSGE    []verbs.SGE
}

// openRecvs makes the CQ (for nqps QPs) and the slots; the caller's
// Close releases what was made on an error.
func (r *answerRecvs) openRecvs(dev verbs.Device, pd verbs.PD, nqps, perQP, slotLen int) (err error) {
	r.recvN, r.slotLen = perQP, slotLen
	if r.recvCQ, err = dev.CreateCQ(nqps * perQP); err != nil {
		return fmt.Errorf("receive CQ: %w", err)
	}
	if r.recvMR, err = pd.RegMR(nqps*perQP*slotLen, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	r.wcs = make([]verbs.WC, 64)
	r.recvWRs = make([]verbs.RecvWR, max(perQP, len(r.wcs)))
	r.recvSGE = make([]verbs.SGE, len(r.recvWRs))
	for i := range r.recvWRs {
		r.recvWRs[i].SG = r.recvSGE[i : i+1]
	}
	return nil
}

// setRecv makes work request i post slot s of QP qi.
func (r *answerRecvs) setRecv(i, qi, s int) {
	slot := qi*r.recvN + s
	r.recvWRs[i].ID = uint64(slot)
	r.recvSGE[i] = verbs.SGE{Addr: r.recvMR.Addr() + uint64(slot*r.slotLen), Length: uint32(r.slotLen), LKey: r.recvMR.LKey()}
}

// fillRecvs posts every slot of QP qi (before any request leaves).
func (r *answerRecvs) fillRecvs(qi int, qp verbs.QP) error {
	for s := range r.recvN {
		r.setRecv(s, qi, s)
	}
	_, err := qp.PostRecv(r.recvWRs[:r.recvN])
	return err
}

// answersOf takes the completions of QP qp (number qi) among r.wcs[:n]:
// each one's slot goes back to qp, all in one chain, and each answer
// that passes answerPayload is handed to each, with its receive stamp
// (verbs.WC.Arrived). each must not keep payload.
func (r *answerRecvs) answersOf(qi, n int, qp verbs.QP, st *stats, each func(payload []byte, arrived verbs.Time)) {
	buf := r.recvMR.Bytes()
	nr := 0
	for i := range r.wcs[:n] {
		wc := &r.wcs[i]
		slot := int(wc.ID)
		if slot/r.recvN != qi {
			continue
		}
		r.setRecv(nr, qi, slot%r.recvN)
		nr++
		if payload := answerPayload(wc, buf, r.slotLen, r.answerFrom, st); payload != nil {
			each(payload, wc.Arrived)
		}
	}
	if nr > 0 {
		qp.PostRecv(r.recvWRs[:nr]) // a refused RECV only shrinks the queue; answers then time out
	}
}
