//go:build linux

package soft

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// sendSlot is an RC send WR in flight: kept until it is acknowledged (or
// answered), so that it can be retransmitted.
type sendSlot struct {
	id       uint64
	op       verbs.Opcode
	signaled bool
	sg       [maxSGE]verbs.SGE
	nsg      int
	total    int
	imm      uint32
	raddr    uint64
	rkey     uint32
	cmpAdd   uint64
	swap     uint64
	fpsn     uint32 // first PSN
	npk      int    // PSNs it uses
	readNext int    // READ: response packets received
	done     bool
}

func (s *sendSlot) lpsn() uint32 { return (s.fpsn + uint32(s.npk) - 1) & verbs.PSNMask }

// requester is the send side of an RC QP. Callers hold the QP's sqMu.
type requester struct {
	ring     []sendSlot
	head, n  int
	retries  int
	rnr      int
	deadline time.Time
	active   bool
}

func (r *requester) init(depth int) { r.ring = make([]sendSlot, depth) }

func (r *requester) reset(uint32) {
	r.head, r.n, r.retries, r.rnr = 0, 0, 0, 0
}

func (r *requester) inflight() bool { return r.active }

func (r *requester) at(i int) *sendSlot { return &r.ring[(r.head+i)%len(r.ring)] }

func psnDiff(a, b uint32) int32 { return verbs.PSN(a).Diff(verbs.PSN(b)) }

// timeoutFor converts the IBTA local ACK timeout exponent into a duration,
// no shorter than one tick.
func timeoutFor(exp uint8) time.Duration {
	if exp == 0 || exp > 30 {
		exp = 14
	}
	d := time.Duration(4096<<exp) * time.Nanosecond
	return max(d, 2*tickPeriod)
}

// setActive keeps the queue's count of RC QPs that need timer ticks.
func (x *qp) setActive(on bool) {
	if x.req.active != on {
		x.req.active = on
		if on {
			if x.q.active.Add(1) == 1 {
				x.q.kickRead()
			}
		} else {
			x.q.active.Add(-1)
		}
	}
}

func (x *qp) postRC(wrs []verbs.SendWR) (int, error) {
	x.sqMu.Lock()
	defer x.sqMu.Unlock()
	r := &x.req
	q := x.q
	var err error
	n := 0
	q.txMu.Lock()
	for i := range wrs {
		wr := &wrs[i]
		if r.n == len(r.ring) {
			err = fmt.Errorf("%w: %d RC work requests in flight", verbs.ErrQueueFull, r.n)
			break
		}
		var total int
		switch wr.Opcode {
		case verbs.OpSend, verbs.OpSendWithImm, verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
			total, err = x.checkGather(wr)
		case verbs.OpRDMARead:
			total, err = x.checkGather(wr)
			if err == nil {
				for j := range wr.SG {
					if _, err = x.checkSGE(&wr.SG[j], verbs.AccessLocalWrite); err != nil {
						break
					}
				}
			}
		case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
			if len(wr.SG) != 1 || wr.SG[0].Length != 8 {
				err = fmt.Errorf("%w: an atomic needs one 8-byte SGE", verbs.ErrInvalidArgument)
			} else if _, err = x.checkSGE(&wr.SG[0], verbs.AccessLocalWrite); err == nil && wr.RemoteAddr%8 != 0 {
				err = fmt.Errorf("%w: atomic remote address 0x%x not 8-byte aligned", verbs.ErrInvalidArgument, wr.RemoteAddr)
			}
			total = 8
		default:
			err = fmt.Errorf("%w: %v on an RC QP", verbs.ErrInvalidArgument, wr.Opcode)
		}
		if err != nil {
			break
		}
		s := r.at(r.n)
		*s = sendSlot{id: wr.ID, op: wr.Opcode, signaled: x.signaled(wr), total: total, imm: wr.Imm,
			raddr: wr.RemoteAddr, rkey: wr.RKey, cmpAdd: wr.CompareAdd, swap: wr.Swap, fpsn: x.spsn}
		s.nsg = copy(s.sg[:], wr.SG)
		switch wr.Opcode {
		case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
			s.npk = 1
		default:
			s.npk = npkts(total, x.mtu)
		}
		x.spsn = (x.spsn + uint32(s.npk)) & verbs.PSNMask
		r.n++
		x.emitSlot(s, 0)
		n++
	}
	q.doorbell()
	q.txMu.Unlock()
	if r.n > 0 && !r.active {
		r.deadline = time.Now().Add(timeoutFor(x.timeout))
		r.retries = 0
		x.setActive(true)
	}
	return n, err
}

// emitSlot (re)sends slot s from its packet k. Callers hold sqMu and txMu.
func (x *qp) emitSlot(s *sendSlot, k int) {
	switch s.op {
	case verbs.OpRDMARead:
		// A READ resumes after the responses already received.
		done := s.readNext * x.mtu
		pk := rocev2.Packet{Opcode: rocev2.TransportRC | rocev2.OpReadRequest, PKey: rocev2.DefaultPKey,
			DestQP: x.destQPN, PSN: (s.fpsn + uint32(s.readNext)) & verbs.PSNMask, AckReq: true,
			VA: s.raddr + uint64(done), RKey: s.rkey, DMALen: uint32(s.total - done)}
		x.emitHeaderOnly(&pk)
	case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
		op := rocev2.OpFetchAdd
		if s.op == verbs.OpAtomicCmpSwap {
			op = rocev2.OpCompareSwap
		}
		pk := rocev2.Packet{Opcode: rocev2.TransportRC | op, PKey: rocev2.DefaultPKey, DestQP: x.destQPN,
			PSN: s.fpsn, AckReq: true, VA: s.raddr, RKey: s.rkey, SwapAdd: s.cmpAdd, Compare: 0}
		if s.op == verbs.OpAtomicCmpSwap {
			pk.SwapAdd, pk.Compare = s.swap, s.cmpAdd
		}
		x.emitHeaderOnly(&pk)
	default:
		for ; k < s.npk; k++ {
			x.emitMsgPacket(rocev2.TransportRC, s.op, s.sg[:s.nsg], s.total, s.imm, s.raddr, s.rkey,
				s.fpsn+uint32(k), k, s.npk, k == s.npk-1)
		}
	}
}

// emitHeaderOnly sends a packet without payload to the connected peer.
// Callers hold txMu.
func (x *qp) emitHeaderOnly(pk *rocev2.Packet) {
	q := x.q
	b := q.reserve(pk.Opcode.HeaderLen() + rocev2.ICRCLen)
	pk.EncodeHeaders(b, 0)
	clear(b[len(b)-rocev2.ICRCLen:])
	q.putICRC(x.peer, b)
	q.record(x.peer, b)
}

// retransmitFrom resends everything in flight from PSN psn on.
// Callers hold sqMu.
func (x *qp) retransmitFrom(psn uint32) {
	r := &x.req
	x.q.txMu.Lock()
	for i := 0; i < r.n; i++ {
		s := r.at(i)
		if s.done || psnDiff(s.lpsn(), psn) < 0 {
			continue
		}
		k := 0
		if d := psnDiff(psn, s.fpsn); d > 0 && s.op != verbs.OpRDMARead {
			k = int(d)
		}
		x.emitSlot(s, k)
		x.d.ctr.rcRetransmits.Add(1)
	}
	x.q.flush()
	x.q.txMu.Unlock()
	r.deadline = time.Now().Add(timeoutFor(x.timeout))
}

// rcTimer runs on the queue's progress goroutine.
func (x *qp) rcTimer(now time.Time) {
	x.sqMu.Lock()
	defer x.sqMu.Unlock()
	r := &x.req
	if r.n == 0 || now.Before(r.deadline) || x.State() != verbs.StateRTS {
		return
	}
	r.retries++
	if r.retries > int(x.retryCnt) {
		x.failHead(verbs.WCRetryExcErr)
		return
	}
	x.retransmitFrom(r.at(0).fpsn)
}

// complete retires finished slots at the head, in order.
// Callers hold sqMu.
func (x *qp) complete() {
	r := &x.req
	for r.n > 0 {
		s := r.at(0)
		if !s.done {
			break
		}
		if s.signaled {
			wc := verbs.WC{ID: s.id, Opcode: sendWCOpcode(s.op), QPN: verbs.QPN(x.qpn)}
			if s.op == verbs.OpRDMARead {
				wc.ByteLen = uint32(s.total)
			} else if s.op == verbs.OpAtomicFetchAdd || s.op == verbs.OpAtomicCmpSwap {
				wc.ByteLen = 8
			}
			x.sendCQ.push(&wc)
		}
		r.head = (r.head + 1) % len(r.ring)
		r.n--
		r.retries = 0
	}
	if r.n == 0 {
		x.setActive(false)
	} else {
		r.deadline = time.Now().Add(timeoutFor(x.timeout))
	}
}

// ackUpTo marks SENDs and WRITEs whose last PSN is at or before psn as
// done. A READ or atomic still waiting for its answer that psn covers was
// answered by a lost packet: the caller retransmits from it.
// It returns the PSN to retransmit from, or -1.
func (x *qp) ackUpTo(psn uint32) int64 {
	r := &x.req
	for i := 0; i < r.n; i++ {
		s := r.at(i)
		if psnDiff(s.lpsn(), psn) > 0 {
			break
		}
		switch s.op {
		case verbs.OpRDMARead, verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
			if !s.done {
				return int64(s.fpsn + uint32(s.readNext))
			}
		default:
			s.done = true
		}
	}
	return -1
}

// failHead completes the head WR with an error, flushes the rest and moves
// the QP to ERR. Callers hold sqMu.
func (x *qp) failHead(st verbs.WCStatus) {
	r := &x.req
	if r.n > 0 {
		s := r.at(0)
		x.sendCQ.push(&verbs.WC{ID: s.id, Status: st, Opcode: sendWCOpcode(s.op), QPN: verbs.QPN(x.qpn)})
		r.head = (r.head + 1) % len(r.ring)
		r.n--
	}
	x.state.Store(uint32(verbs.StateErr))
	r.flush(x, true)
	x.rqMu.Lock()
	for x.rqN > 0 {
		s, _ := x.popRecv()
		x.recvCQ.push(&verbs.WC{ID: s.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: verbs.QPN(x.qpn)})
	}
	x.rqMu.Unlock()
}

// flush empties the send queue. Callers hold sqMu.
func (r *requester) flush(x *qp, complete bool) {
	for r.n > 0 {
		s := r.at(0)
		if complete {
			x.sendCQ.push(&verbs.WC{ID: s.id, Status: verbs.WCWRFlushErr, Opcode: sendWCOpcode(s.op), QPN: verbs.QPN(x.qpn)})
		}
		r.head = (r.head + 1) % len(r.ring)
		r.n--
	}
	x.setActive(false)
}

// recvRCResponse handles ACKs, NAKs, READ responses and atomic ACKs.
func (x *qp) recvRCResponse(pk *rocev2.Packet) {
	x.sqMu.Lock()
	defer x.sqMu.Unlock()
	r := &x.req
	if r.n == 0 {
		return
	}
	op := pk.Opcode.Op()
	// The PSN must fall inside what is in flight.
	first, last := r.at(0).fpsn, r.at(r.n-1).lpsn()
	if psnDiff(pk.PSN, first) < -1 || psnDiff(pk.PSN, last) > 0 {
		x.d.ctr.dropPSN.Add(1)
		return
	}
	switch op {
	case rocev2.OpAcknowledge:
		switch pk.Syndrome & 0xe0 {
		case rocev2.AETHAck:
			r.rnr = 0
			if p := x.ackUpTo(pk.PSN); p >= 0 {
				x.complete()
				x.retransmitFrom(uint32(p))
				return
			}
		case rocev2.AETHRNRNak:
			x.ackUpTo((pk.PSN - 1) & verbs.PSNMask)
			x.complete()
			r.rnr++
			if x.rnrRetry != 7 && r.rnr > int(x.rnrRetry) {
				x.failHead(verbs.WCRNRRetryExcErr)
				return
			}
			// Retransmit on the next timer tick.
			r.deadline = time.Now().Add(tickPeriod)
			return
		case rocev2.AETHNak:
			x.ackUpTo((pk.PSN - 1) & verbs.PSNMask)
			x.complete()
			switch pk.Syndrome {
			case rocev2.AETHNakSeqErr:
				x.retransmitFrom(pk.PSN)
			case rocev2.AETHNakRemAcc:
				x.failHead(verbs.WCRemAccessErr)
			case rocev2.AETHNakRemOp:
				x.failHead(verbs.WCRemOpErr)
			default:
				x.failHead(verbs.WCRemInvReqErr)
			}
			return
		}
	case rocev2.OpAtomicAcknowledge:
		x.ackUpTo((pk.PSN - 1) & verbs.PSNMask)
		for i := 0; i < r.n; i++ {
			s := r.at(i)
			if s.fpsn == pk.PSN && (s.op == verbs.OpAtomicFetchAdd || s.op == verbs.OpAtomicCmpSwap) && !s.done {
				var v [8]byte
				binary.LittleEndian.PutUint64(v[:], pk.OrigData)
				x.scatterSend(s, 0, v[:])
				s.done = true
				break
			}
		}
	case rocev2.OpReadResponseFirst, rocev2.OpReadResponseMiddle, rocev2.OpReadResponseLast, rocev2.OpReadResponseOnly:
		for i := 0; i < r.n; i++ {
			s := r.at(i)
			if s.op != verbs.OpRDMARead || s.done {
				continue
			}
			if pk.PSN != (s.fpsn+uint32(s.readNext))&verbs.PSNMask {
				break // out of order: the timer will ask again
			}
			x.ackUpTo((s.fpsn - 1) & verbs.PSNMask)
			x.scatterSend(s, s.readNext*x.mtu, pk.Payload)
			s.readNext++
			if s.readNext == s.npk {
				s.done = true
			}
			break
		}
	}
	x.complete()
}

// scatterSend writes a READ response or atomic result into the WR's local
// buffers at offset off.
func (x *qp) scatterSend(s *sendSlot, off int, data []byte) {
	var none []byte
	for i := 0; i < s.nsg && len(data) > 0; i++ {
		if !x.scatterSGE(&s.sg[i], nil, &off, &data, &none) {
			return
		}
	}
}

// ---- responder ----

// recvRCRequest executes an RC request in PSN order, exactly once.
func (x *qp) recvRCRequest(pk *rocev2.Packet) {
	d := x.d
	x.rqMu.Lock()
	defer x.rqMu.Unlock()
	r := &x.resp
	diff := psnDiff(pk.PSN, r.epsn)
	op := pk.Opcode.Op()
	if diff > 0 {
		// A gap: ask for the missing packets once.
		d.ctr.dropPSN.Add(1)
		if !r.nakSent {
			r.nakSent = true
			x.sendAck(rocev2.AETHNakSeqErr, r.epsn)
		}
		return
	}
	if diff < 0 {
		d.ctr.rcDuplicates.Add(1)
		switch op {
		case rocev2.OpReadRequest:
			x.rcRead(pk, false)
		case rocev2.OpFetchAdd, rocev2.OpCompareSwap:
			for i := range r.atomics {
				a := &r.atomics[i]
				if a.valid && a.psn == pk.PSN {
					x.sendAtomicAck(pk.PSN, a.orig)
					return
				}
			}
		default:
			x.queueAck()
		}
		return
	}
	r.nakSent = false
	switch {
	case op == rocev2.OpReadRequest:
		x.rcRead(pk, true)
	case op == rocev2.OpFetchAdd || op == rocev2.OpCompareSwap:
		x.rcAtomic(pk)
	case isWriteOp(pk.Opcode):
		x.rcWrite(pk)
	default:
		x.rcSend(pk)
	}
}

func (x *qp) nak(code uint8) {
	x.d.ctr.rcNaks.Add(1)
	x.sendAck(code, x.resp.epsn)
}

func (x *qp) advance(pk *rocev2.Packet) {
	r := &x.resp
	r.epsn = (r.epsn + 1) & verbs.PSNMask
	if pk.AckReq || pk.Opcode.IsEnd() {
		x.queueAck()
	}
}

func (x *qp) rcSend(pk *rocev2.Packet) {
	r := &x.resp
	op := pk.Opcode
	if op.IsStart() {
		if x.rqN == 0 {
			x.d.ctr.rcNaks.Add(1)
			x.sendAck(rocev2.AETHRNRNak|1, r.epsn)
			return
		}
		r.inMsg, r.write, r.off = true, false, 0
	} else if !r.inMsg || r.write {
		x.nak(rocev2.AETHNakInvReq)
		return
	}
	if !x.scatter(x.rqHead, r.off, pk.Payload, nil) {
		r.inMsg = false
		s, _ := x.popRecv()
		x.recvCQ.push(&verbs.WC{ID: s.id, Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv, QPN: verbs.QPN(x.qpn)})
		x.nak(rocev2.AETHNakInvReq)
		return
	}
	r.off += len(pk.Payload)
	if op.IsEnd() {
		r.inMsg = false
		s, _ := x.popRecv()
		wc := verbs.WC{ID: s.id, Opcode: verbs.WCRecv, ByteLen: uint32(r.off), QPN: verbs.QPN(x.qpn), Arrived: x.q.rxArrived}
		if op.HasImm() {
			wc.Flags, wc.Imm = verbs.WCWithImm, pk.Imm
		}
		x.recvCQ.push(&wc)
		r.msn++
	}
	x.advance(pk)
}

func (x *qp) rcWrite(pk *rocev2.Packet) {
	r := &x.resp
	op := pk.Opcode
	if op.HasRETH() {
		m, _ := x.checkRKey(pk.RKey, pk.VA, pk.DMALen, verbs.AccessRemoteWrite)
		if m == nil {
			x.d.ctr.dropRKey.Add(1)
			x.nak(rocev2.AETHNakRemAcc)
			return
		}
		r.inMsg, r.write, r.wmr, r.wva, r.wleft, r.wlen = true, true, m, pk.VA, pk.DMALen, pk.DMALen
	} else if !r.inMsg || !r.write {
		x.nak(rocev2.AETHNakInvReq)
		return
	}
	n := uint32(len(pk.Payload))
	if n > r.wleft || (!op.IsEnd() && n != uint32(x.mtu)) {
		r.inMsg = false
		x.nak(rocev2.AETHNakInvReq)
		return
	}
	if op.HasImm() && x.rqN == 0 {
		x.d.ctr.rcNaks.Add(1)
		x.sendAck(rocev2.AETHRNRNak|1, r.epsn)
		return
	}
	if dst, ok := r.wmr.slice(r.wva, n); ok {
		copy(dst, pk.Payload)
	}
	r.wva += uint64(n)
	r.wleft -= n
	if op.IsEnd() {
		r.inMsg = false
		r.msn++
		if op.HasImm() {
			s, _ := x.popRecv()
			x.recvCQ.push(&verbs.WC{ID: s.id, Opcode: verbs.WCRecvRDMAWithImm, Flags: verbs.WCWithImm,
				Imm: pk.Imm, ByteLen: r.wlen, QPN: verbs.QPN(x.qpn), Arrived: x.q.rxArrived})
		}
	}
	x.advance(pk)
}

// rcRead answers a READ request from memory. A duplicate request is
// answered again (READs are idempotent); fresh ones advance the PSN.
func (x *qp) rcRead(pk *rocev2.Packet, fresh bool) {
	r := &x.resp
	_, src := x.checkRKey(pk.RKey, pk.VA, pk.DMALen, verbs.AccessRemoteRead)
	if src == nil {
		if fresh {
			x.d.ctr.dropRKey.Add(1)
			x.nak(rocev2.AETHNakRemAcc)
		}
		return
	}
	npk := npkts(len(src), x.mtu)
	if fresh {
		r.epsn = (r.epsn + uint32(npk)) & verbs.PSNMask
		r.msn++
	}
	q := x.q
	q.txMu.Lock()
	for k := 0; k < npk; k++ {
		var o rocev2.Opcode
		switch {
		case npk == 1:
			o = rocev2.OpReadResponseOnly
		case k == 0:
			o = rocev2.OpReadResponseFirst
		case k == npk-1:
			o = rocev2.OpReadResponseLast
		default:
			o = rocev2.OpReadResponseMiddle
		}
		o |= rocev2.TransportRC
		chunk := src[k*x.mtu : min((k+1)*x.mtu, len(src))]
		out := rocev2.Packet{Opcode: o, PKey: rocev2.DefaultPKey, DestQP: x.destQPN,
			PSN: (pk.PSN + uint32(k)) & verbs.PSNMask, Syndrome: rocev2.AETHAckUnlimitedCredits, MSN: r.msn}
		hl := o.HeaderLen()
		pad := (4 - len(chunk)&3) & 3
		b := q.reserve(hl + len(chunk) + pad + rocev2.ICRCLen)
		out.EncodeHeaders(b, pad)
		copy(b[hl:], chunk)
		clear(b[hl+len(chunk):])
		q.putICRC(x.peer, b)
		q.record(x.peer, b)
	}
	q.txMu.Unlock()
}

func (x *qp) rcAtomic(pk *rocev2.Packet) {
	r := &x.resp
	m, mem := x.checkRKey(pk.RKey, pk.VA, 8, verbs.AccessRemoteAtomic)
	if mem == nil {
		x.d.ctr.dropRKey.Add(1)
		x.nak(rocev2.AETHNakRemAcc)
		return
	}
	if pk.VA%8 != 0 {
		x.nak(rocev2.AETHNakInvReq)
		return
	}
	w := (*uint64)(unsafe.Pointer(&mem[0]))
	var orig uint64
	if m.policy != nil {
		var v policyVerdict
		switch orig, v = m.policy.fetchAdd(w, pk); v {
		case policyHeld:
			x.holdAtomic()
			return
		case policyRefused:
			x.refuseAtomic(m)
			return
		}
	} else if pk.Opcode.Op() == rocev2.OpFetchAdd {
		orig = atomic.AddUint64(w, pk.SwapAdd) - pk.SwapAdd
	} else {
		for {
			orig = atomic.LoadUint64(w)
			if orig != pk.Compare || atomic.CompareAndSwapUint64(w, orig, pk.SwapAdd) {
				break
			}
		}
	}
	a := &r.atomics[r.atomIdx]
	r.atomIdx = (r.atomIdx + 1) % len(r.atomics)
	*a = atomicResult{psn: pk.PSN, orig: orig, valid: true}
	r.epsn = (r.epsn + 1) & verbs.PSNMask
	r.msn++
	x.sendAtomicAck(pk.PSN, orig)
}

func (x *qp) sendAtomicAck(psn uint32, orig uint64) {
	pk := rocev2.Packet{Opcode: rocev2.TransportRC | rocev2.OpAtomicAcknowledge, PKey: rocev2.DefaultPKey,
		DestQP: x.destQPN, PSN: psn, Syndrome: rocev2.AETHAckUnlimitedCredits, MSN: x.resp.msn, OrigData: orig}
	x.q.txMu.Lock()
	x.emitHeaderOnly(&pk)
	x.q.txMu.Unlock()
}

// queueAck asks for a coalesced ACK at the end of the receive burst.
// Callers hold rqMu (and the queue's rxMu).
func (x *qp) queueAck() {
	r := &x.resp
	r.ackPending = true
	if !r.queued {
		r.queued = true
		x.q.acks = append(x.q.acks, x)
	}
}

// sendPendingAck sends the coalesced ACK. Runs under the queue's rxMu.
func (x *qp) sendPendingAck() {
	x.rqMu.Lock()
	r := &x.resp
	r.queued = false
	if r.ackPending {
		r.ackPending = false
		x.sendAck(rocev2.AETHAckUnlimitedCredits, (r.epsn-1)&verbs.PSNMask)
	}
	x.rqMu.Unlock()
}

// sendAck sends an ACK or NAK. Callers hold rqMu.
func (x *qp) sendAck(syndrome uint8, psn uint32) {
	pk := rocev2.Packet{Opcode: rocev2.TransportRC | rocev2.OpAcknowledge, PKey: rocev2.DefaultPKey,
		DestQP: x.destQPN, PSN: psn, Syndrome: syndrome, MSN: x.resp.msn}
	x.q.txMu.Lock()
	x.emitHeaderOnly(&pk)
	x.q.txMu.Unlock()
}
