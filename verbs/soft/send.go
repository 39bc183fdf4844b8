//go:build linux

package soft

import (
	"fmt"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

func (x *qp) PostSend(wrs []verbs.SendWR) (int, error) {
	if x.closed.Load() {
		return 0, verbs.ErrClosed
	}
	if st := x.State(); st != verbs.StateRTS {
		return 0, fmt.Errorf("%w: post send in %v", verbs.ErrQPState, st)
	}
	switch x.typ {
	case verbs.UD:
		return x.postUD(wrs)
	case verbs.UC:
		return x.postUC(wrs)
	default:
		return x.postRC(wrs)
	}
}

// checkGather validates a gather list and returns its length.
func (x *qp) checkGather(wr *verbs.SendWR) (int, error) {
	if len(wr.SG) > x.cap.MaxSendSGE {
		return 0, fmt.Errorf("%w: %d SGEs, QP takes %d", verbs.ErrInvalidArgument, len(wr.SG), x.cap.MaxSendSGE)
	}
	total := 0
	for j := range wr.SG {
		if _, err := x.checkSGE(&wr.SG[j], 0); err != nil {
			return 0, fmt.Errorf("SGE %d: %w", j, err)
		}
		total += int(wr.SG[j].Length)
	}
	if wr.Flags&verbs.Inline != 0 && total > x.cap.MaxInlineData {
		return 0, fmt.Errorf("%w: %d bytes inline, QP takes %d", verbs.ErrInvalidArgument, total, x.cap.MaxInlineData)
	}
	return total, nil
}

// gather copies bytes [off, off+len(dst)) of the gather list into dst.
func (x *qp) gather(sg []verbs.SGE, off int, dst []byte) {
	for i := range sg {
		if len(dst) == 0 {
			return
		}
		s := &sg[i]
		if off >= int(s.Length) {
			off -= int(s.Length)
			continue
		}
		m := x.d.lookupMR(s.LKey, false)
		if m == nil {
			return // validated at post; a region closed since sends zeros
		}
		src, ok := m.slice(s.Addr, s.Length)
		if !ok {
			return
		}
		n := copy(dst, src[off:])
		dst = dst[n:]
		off = 0
	}
}

func (x *qp) signaled(wr *verbs.SendWR) bool { return x.sigAll || wr.Flags&verbs.Signaled != 0 }

// postUD sends each WR as one UD packet and rings one doorbell.
//
// The sequencer's packet, a header-only SEND_WITH_IMM, takes a fast path
// once the chain's first WR to an AH has been validated in full (by
// postUDOne): further WRs to the same AH only need their opcode, length
// and QPN checked, and their ICRC comes from the peer's
// rocev2.UDImmICRC.
func (x *qp) postUD(wrs []verbs.SendWR) (int, error) {
	q := x.q
	var err error
	n := 0
	var fastAH *ah // validated for this chain
	var fastPeer *peer
	q.txMu.Lock()
	faults := q.d.cfg.faults()
	for i := range wrs {
		wr := &wrs[i]
		if i >= x.cap.MaxSendWR {
			err = fmt.Errorf("%w: chain of %d exceeds the send queue (%d)", verbs.ErrQueueFull, len(wrs), x.cap.MaxSendWR)
			break
		}
		if a, _ := wr.AH.(*ah); a != fastAH || a == nil || wr.Opcode != verbs.OpSendWithImm || len(wr.SG) != 0 ||
			wr.Flags&verbs.Solicited != 0 || wr.RemoteQPN > verbs.MaxQPN || faults {
			if fastAH, fastPeer, err = x.postUDOne(wr, i); err != nil {
				break
			}
			n++
			continue
		}
		qkey := wr.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = x.qkey.Load()
		}
		b := q.reserve(rocev2.UDImmLen)
		fastPeer.udimm.Put(b, fastPeer.prefix(rocev2.UDImmLen), uint32(wr.RemoteQPN), x.spsn, qkey, x.qpn, wr.Imm)
		q.pkts = append(q.pkts, txPkt{pe: fastPeer, off: int32(q.used), n: rocev2.UDImmLen})
		if wr.Deadline != 0 {
			q.deadline(len(q.pkts)-1, i, wr.Deadline)
		}
		q.used += rocev2.UDImmLen
		x.spsn = (x.spsn + 1) & verbs.PSNMask
		n++
	}
	q.doorbell()
	var late []int32
	if len(q.late) > 0 { // rare: a copy, so that the completions go out unlocked
		late = append(late, q.late...)
		q.late = q.late[:0]
	}
	q.txMu.Unlock()
	x.completeSendsLate(wrs[:n], late)
	return n, err
}

// deadline gives packet k, which carries work request i of the chain
// being posted, its deadline. Callers hold txMu.
func (q *queue) deadline(k, i int, dl verbs.Time) {
	p := &q.pkts[k]
	p.wr, p.dl = int32(i)+1, dl
	if q.dlMin == 0 || dl < q.dlMin {
		q.dlMin = dl
	}
}

// postUDOne validates and encodes one UD send, work request i of its
// chain. For a header-only SEND_WITH_IMM it returns its AH and peer,
// which the rest of the chain may then take the fast path to. Callers
// hold txMu.
func (x *qp) postUDOne(wr *verbs.SendWR, i int) (*ah, *peer, error) {
	q := x.q
	var op rocev2.Opcode
	switch wr.Opcode {
	case verbs.OpSend:
		op = rocev2.UDSendOnly
	case verbs.OpSendWithImm:
		op = rocev2.UDSendOnlyWithImm
	default:
		return nil, nil, fmt.Errorf("%w: %v on a UD QP", verbs.ErrInvalidArgument, wr.Opcode)
	}
	a, ok := wr.AH.(*ah)
	if !ok || a == nil || a.pd != x.pd || a.closed.Load() {
		return nil, nil, fmt.Errorf("%w: UD send needs a live AH of this PD", verbs.ErrInvalidArgument)
	}
	if wr.RemoteQPN > verbs.MaxQPN {
		return nil, nil, fmt.Errorf("%w: remote %v", verbs.ErrInvalidArgument, wr.RemoteQPN)
	}
	total, err := x.checkGather(wr)
	if err != nil {
		return nil, nil, err
	}
	if total > x.mtu || total > maxMsgUD {
		return nil, nil, fmt.Errorf("%w: UD message of %d bytes exceeds the MTU %d", verbs.ErrInvalidArgument, total, x.mtu)
	}
	qkey := wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = x.qkey.Load() // a "controlled" Q_Key means: use the QP's own
	}
	pe := a.peers[q.idx]
	hl := op.HeaderLen()
	pad := (4 - total&3) & 3
	b := q.reserve(hl + total + pad + rocev2.ICRCLen)
	var fast *ah
	if total == 0 && op == rocev2.UDSendOnlyWithImm && wr.Flags&verbs.Solicited == 0 {
		// The sequencer's packet: later ones to this AH take the fast path.
		pe.udimm.Put(b, pe.prefix(rocev2.UDImmLen), uint32(wr.RemoteQPN), x.spsn, qkey, x.qpn, wr.Imm)
		fast = a
	} else {
		pk := rocev2.Packet{Opcode: op, PKey: rocev2.DefaultPKey, DestQP: uint32(wr.RemoteQPN), PSN: x.spsn,
			QKey: qkey, SrcQP: x.qpn, Imm: wr.Imm, SE: wr.Flags&verbs.Solicited != 0}
		pk.EncodeHeaders(b, pad)
		x.gather(wr.SG, 0, b[hl:hl+total])
		clear(b[hl+total:])
		q.putICRC(pe, b)
	}
	k := len(q.pkts) // reserve flushed already, if it had to
	q.record(pe, b)
	if wr.Deadline != 0 {
		// A duplicate (fault injection) shares the deadline, not the
		// completion; a packet held back for reordering is in the
		// network already.
		for j := k; j < len(q.pkts); j++ {
			q.deadline(j, i, wr.Deadline)
			if j > k {
				q.pkts[j].wr = 0
			}
		}
	}
	x.spsn = (x.spsn + 1) & verbs.PSNMask
	if fast == nil {
		return nil, nil, nil
	}
	return fast, pe, nil
}

// completeSendsLate reports the WRs of a UD chain: those at the
// indices late (ascending) were dropped for their deadline and complete
// with WCDeadlineErr, signaled or not; the others as completeSends.
func (x *qp) completeSendsLate(wrs []verbs.SendWR, late []int32) {
	if len(late) == 0 {
		x.completeSends(wrs)
		return
	}
	for i := range wrs {
		wr := &wrs[i]
		if len(late) > 0 && late[0] == int32(i) {
			late = late[1:]
			x.sendCQ.push(&verbs.WC{ID: wr.ID, Status: verbs.WCDeadlineErr, Opcode: sendWCOpcode(wr.Opcode), QPN: verbs.QPN(x.qpn)})
			continue
		}
		if x.signaled(wr) {
			x.sendCQ.push(&verbs.WC{ID: wr.ID, Opcode: sendWCOpcode(wr.Opcode), QPN: verbs.QPN(x.qpn)})
		}
	}
}

// completeSends reports the signaled WRs of a chain that has left.
func (x *qp) completeSends(wrs []verbs.SendWR) {
	for i := range wrs {
		wr := &wrs[i]
		if x.signaled(wr) {
			x.sendCQ.push(&verbs.WC{ID: wr.ID, Opcode: sendWCOpcode(wr.Opcode), QPN: verbs.QPN(x.qpn)})
		}
	}
}

func sendWCOpcode(op verbs.Opcode) verbs.WCOpcode {
	switch op {
	case verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.OpRDMARead:
		return verbs.WCRDMARead
	case verbs.OpAtomicFetchAdd:
		return verbs.WCFetchAdd
	case verbs.OpAtomicCmpSwap:
		return verbs.WCCompSwap
	}
	return verbs.WCSend
}

// msgOpcode returns the opcode of packet k of npk of a SEND or WRITE
// message.
func msgOpcode(t rocev2.Opcode, op verbs.Opcode, k, npk int) rocev2.Opcode {
	write := op == verbs.OpRDMAWrite || op == verbs.OpRDMAWriteWithImm
	imm := op == verbs.OpSendWithImm || op == verbs.OpRDMAWriteWithImm
	var o rocev2.Opcode
	switch {
	case npk == 1 && write && imm:
		o = rocev2.OpWriteOnlyWithImm
	case npk == 1 && write:
		o = rocev2.OpWriteOnly
	case npk == 1 && imm:
		o = rocev2.OpSendOnlyWithImm
	case npk == 1:
		o = rocev2.OpSendOnly
	case k == 0 && write:
		o = rocev2.OpWriteFirst
	case k == 0:
		o = rocev2.OpSendFirst
	case k < npk-1 && write:
		o = rocev2.OpWriteMiddle
	case k < npk-1:
		o = rocev2.OpSendMiddle
	case write && imm:
		o = rocev2.OpWriteLastWithImm
	case write:
		o = rocev2.OpWriteLast
	case imm:
		o = rocev2.OpSendLastWithImm
	default:
		o = rocev2.OpSendLast
	}
	return t | o
}

func npkts(total, mtu int) int {
	if total <= mtu {
		return 1
	}
	return (total + mtu - 1) / mtu
}

// emitMsgPacket encodes packet k of a SEND or WRITE message on the
// connected QP. Callers hold txMu.
func (x *qp) emitMsgPacket(t rocev2.Opcode, op verbs.Opcode, sg []verbs.SGE, total int, imm uint32,
	raddr uint64, rkey uint32, psn uint32, k, npk int, ackReq bool) {
	q := x.q
	o := msgOpcode(t, op, k, npk)
	off := k * x.mtu
	plen := min(x.mtu, total-off)
	pk := rocev2.Packet{Opcode: o, PKey: rocev2.DefaultPKey, DestQP: x.destQPN, PSN: psn & verbs.PSNMask,
		AckReq: ackReq, Imm: imm, VA: raddr, RKey: rkey, DMALen: uint32(total)}
	hl := o.HeaderLen()
	pad := (4 - plen&3) & 3
	b := q.reserve(hl + plen + pad + rocev2.ICRCLen)
	pk.EncodeHeaders(b, pad)
	x.gather(sg, off, b[hl:hl+plen])
	clear(b[hl+plen:])
	q.putICRC(x.peer, b)
	q.record(x.peer, b)
}

// postUC sends SENDs and WRITEs on a UC QP, segmented by the path MTU.
func (x *qp) postUC(wrs []verbs.SendWR) (int, error) {
	q := x.q
	var err error
	n := 0
	q.txMu.Lock()
	for i := range wrs {
		wr := &wrs[i]
		if i >= x.cap.MaxSendWR {
			err = fmt.Errorf("%w: chain of %d exceeds the send queue (%d)", verbs.ErrQueueFull, len(wrs), x.cap.MaxSendWR)
			break
		}
		switch wr.Opcode {
		case verbs.OpSend, verbs.OpSendWithImm, verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
		default:
			err = fmt.Errorf("%w: %v on a UC QP", verbs.ErrInvalidArgument, wr.Opcode)
		}
		if err != nil {
			break
		}
		var total int
		if total, err = x.checkGather(wr); err != nil {
			break
		}
		npk := npkts(total, x.mtu)
		for k := 0; k < npk; k++ {
			x.emitMsgPacket(rocev2.TransportUC, wr.Opcode, wr.SG, total, wr.Imm, wr.RemoteAddr, wr.RKey, x.spsn, k, npk, false)
			x.spsn = (x.spsn + 1) & verbs.PSNMask
		}
		n++
	}
	q.doorbell()
	q.txMu.Unlock()
	x.completeSends(wrs[:n])
	return n, err
}
