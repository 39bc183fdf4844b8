//go:build linux

package soft

import (
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// rxFlow is what a queue's receive path keeps about the source and size
// of the last packet: the ICRC prefix, and for UD receives the GRH and
// the sender's GID. A burst's packets mostly share them (a GRO
// super-packet is one sender's run of equal-size packets).
type rxFlow struct {
	src   [4]byte
	dst   [4]byte
	port  uint16
	n     int
	pre   uint32
	gid   verbs.GID
	grh   [verbs.GRHLen]byte
	icrc  rocev2.Patcher
	udimm rocev2.UDImmICRC
	ids   rocev2.IDTerms // for n, set when a packet first needs it
	// nextID is the IPv4 ID predicted for the flow's next packet (the one
	// after the last recovered, as in a GSO run) and nextTerm its
	// ids.Term.
	nextID   uint16
	nextTerm uint32
}

// icrcOK reports whether got, a received packet's ICRC, is right for the
// packet whose ICRC for IPv4 ID 0 is sum0. A socket never sees the ID: a
// soft sender's single datagrams carry 0, but segments the kernel or a
// NIC cut from a GSO run carry 1, 2, ..., and a NIC or rxe stamps IDs of
// its own. Any other ID is recovered from the difference (rocev2.IDTerms)
// and counted.
func (q *queue) icrcOK(c *rxFlow, sum0, got uint32) (ok, recovered bool) {
	if q.xdp != nil && q.xdp.inFrame {
		return q.xdp.icrcOK(q, c, sum0, got), false
	}
	if sum0 == got {
		return true, false
	}
	if c.ids.Len() != c.n {
		c.ids.Set(c.n)
		c.nextID, c.nextTerm = 0, 0
	}
	// The segments of a GSO run carry consecutive IDs: try the one after
	// the last recovered before solving for it.
	id := c.nextID
	if sum0^c.nextTerm != got {
		var ok bool
		if id, ok = c.ids.Solve(sum0, got); !ok {
			q.d.ctr.dropICRC.Add(1)
			return false, false
		}
		c.nextTerm = c.ids.Term(id)
	}
	c.nextID, c.nextTerm = id+1, c.ids.Next(id, c.nextTerm)
	return true, true
}

// set makes c the flow of n-byte packets from src:sport to dst:dport. Its
// ICRC prefix comes from t when t is for that destination and length;
// an unset t is built for the first flow of the sequencer's packets
// (UDImmLen), whose senders change from packet to packet when many
// clients each have one request in flight.
//
// Nothing here builds a struct field by field and then reads it whole:
// with a new sender on every packet that stalled on store forwarding
// once per packet (most of set's samples under 1,024 flows).
func (c *rxFlow) set(t *rocev2.PrefixTable, src, dst [4]byte, sport, dport uint16, n int) {
	c.src, c.dst, c.port, c.n = src, dst, sport, n
	if t.Len() == 0 && n == rocev2.UDImmLen {
		t.Set(rocev2.Flow{Dst: dst, DstPort: dport, FlagsFrag: 0x4000}, n)
	}
	if t.For(dst, dport, n) {
		c.pre = t.Prefix(src, sport)
	} else {
		f := rocev2.Flow{Src: src, Dst: dst, SrcPort: sport, DstPort: dport, FlagsFrag: 0x4000}
		c.pre = f.Prefix(n)
	}
	// An IPv4-mapped GID: bytes 0-9 stay zero.
	c.gid[10], c.gid[11] = 0xff, 0xff
	c.gid[12], c.gid[13], c.gid[14], c.gid[15] = src[0], src[1], src[2], src[3]
	grh(&c.grh, src, dst, n)
}

// input processes one received transport packet (BTH through ICRC) from
// src:sport. Callers hold rxMu. Everything that is not a well-formed packet
// for a live QP in a receiving state is dropped and counted.
func (q *queue) input(b []byte, src [4]byte, sport uint16) {
	d := q.d
	var pk rocev2.Packet
	udImm := rocev2.ParseUDImm(b, &pk)
	if !udImm {
		// Everything but a header-only UD SEND_WITH_IMM (the sequencer's
		// packet) goes through the general decoder; connected QPs take
		// their own locks.
		q.unlockRQ()
		if err := pk.Decode(b); err != nil {
			if len(b) >= 1 && !rocev2.Opcode(b[0]).Valid() {
				d.ctr.dropOpcode.Add(1)
			} else {
				d.ctr.dropMalformed.Add(1)
			}
			return
		}
	}
	c := &q.rxPre
	if c.n != len(b) || c.src != src || c.port != sport || c.dst != q.rxDst {
		c.set(&q.rxTab, src, q.rxDst, sport, q.local.Port(), len(b))
	}
	var sum uint32
	if udImm {
		sum = c.udimm.ICRC(c.pre, b)
	} else {
		sum = c.icrc.ICRC(c.pre, b)
	}
	ok, recovered := q.icrcOK(c, sum, le32(b[len(b)-rocev2.ICRCLen:]))
	if recovered {
		d.ctr.rxIPID.Add(1)
	}
	if !ok {
		return
	}
	if pk.PKey&0x7fff != 0x7fff {
		d.ctr.dropPKey.Add(1)
		return
	}
	x := d.lookupQP(pk.DestQP)
	if x == nil || x.q != q {
		d.ctr.dropQPN.Add(1)
		return
	}
	st := x.State()
	if st != verbs.StateRTR && st != verbs.StateRTS {
		d.ctr.dropOpcode.Add(1)
		return
	}
	switch {
	case x.typ == verbs.UD && pk.Opcode.Transport() == rocev2.TransportUD:
		x.recvUD(&pk, c)
	case x.typ == verbs.UC && pk.Opcode.Transport() == rocev2.TransportUC:
		q.unlockRQ()
		x.recvUC(&pk)
	case x.typ == verbs.RC && pk.Opcode.Transport() == rocev2.TransportRC:
		q.unlockRQ()
		if pk.Opcode.IsRequest() {
			x.recvRCRequest(&pk)
		} else {
			x.recvRCResponse(&pk)
		}
	default:
		d.ctr.dropOpcode.Add(1)
	}
}

// inputUDImmRun processes the UDImmLen-byte segments of one datagram from
// src:sport, as input does each, with what they share looked up once: the
// flow's ICRC prefix, GRH and GID, and the destination QP while it stays
// the same. A segment that is not a header-only UD SEND_WITH_IMM (or a
// short tail) goes through input. It returns the number of segments.
func (q *queue) inputUDImmRun(buf []byte, src [4]byte, sport uint16) int {
	d := q.d
	c := &q.rxPre
	if c.n != rocev2.UDImmLen || c.src != src || c.port != sport || c.dst != q.rxDst {
		c.set(&q.rxTab, src, q.rxDst, sport, q.local.Port(), rocev2.UDImmLen)
	}
	var x *qp
	var pk rocev2.Packet
	n, ids := 0, uint64(0)
	for ; len(buf) > 0; n++ {
		b := buf[:min(len(buf), rocev2.UDImmLen)]
		buf = buf[len(b):]
		if !rocev2.ParseUDImm(b, &pk) {
			q.input(b, src, sport)
			x = nil
			continue
		}
		ok, recovered := q.icrcOK(c, c.udimm.ICRC(c.pre, b), le32(b[rocev2.UDImmLen-rocev2.ICRCLen:]))
		if recovered {
			ids++
		}
		if !ok {
			continue
		}
		if pk.PKey&0x7fff != 0x7fff {
			d.ctr.dropPKey.Add(1)
			continue
		}
		if x == nil || x.qpn != pk.DestQP {
			if x = d.lookupQP(pk.DestQP); x == nil || x.q != q {
				d.ctr.dropQPN.Add(1)
				x = nil
				continue
			}
		}
		if st := x.State(); x.typ != verbs.UD || st != verbs.StateRTR && st != verbs.StateRTS {
			d.ctr.dropOpcode.Add(1)
			continue
		}
		x.recvUD(&pk, c)
	}
	if ids > 0 {
		d.ctr.rxIPID.Add(ids) // once per run, not per packet
	}
	return n
}

// lockRQ makes x's receive queue the one the burst holds: consecutive UD
// packets to one QP (the common case: a batch from one client) take its
// lock once. Callers hold rxMu.
func (q *queue) lockRQ(x *qp) {
	if q.rqHeld != x {
		q.unlockRQ()
		x.rqMu.Lock()
		q.rqHeld = x
	}
}

// unlockRQ releases the receive queue lockRQ took.
func (q *queue) unlockRQ() {
	if q.rqHeld != nil {
		q.rqHeld.rqMu.Unlock()
		q.rqHeld = nil
	}
}

func le32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// afterBurst sends what the burst's packets called for (coalesced RC
// ACKs, READ responses) in one doorbell.
func (q *queue) afterBurst() {
	q.unlockRQ()
	q.flushPend()
	for _, x := range q.acks {
		x.sendPendingAck()
	}
	q.acks = q.acks[:0]
	q.txMu.Lock()
	q.flush()
	q.txMu.Unlock()
}

// grh builds the 40-byte GRH area of a UD receive: for RoCEv2 over IPv4,
// 20 zero bytes and then the packet's IPv4 header.
func grh(g *[verbs.GRHLen]byte, src, dst [4]byte, n int) {
	*g = [verbs.GRHLen]byte{}
	ip := g[20:]
	ip[0] = 0x45
	tot := rocev2.IPv4HeaderLen + rocev2.UDPHeaderLen + n
	ip[2], ip[3] = byte(tot>>8), byte(tot)
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
}

// recvUD delivers a UD SEND from the flow c into the next posted RECV:
// the GRH, then the payload.
func (x *qp) recvUD(pk *rocev2.Packet, c *rxFlow) {
	d := x.d
	if pk.QKey != x.qkey.Load() {
		d.ctr.dropQKey.Add(1)
		return
	}
	q := x.q
	q.lockRQ(x)
	if x.rqN == 0 {
		d.ctr.dropNoRecv.Add(1)
		x.noRecv.Add(1)
		return
	}
	t := x.rqHead
	s := &x.rq[t]
	if x.rqHead++; x.rqHead == len(x.rq) {
		x.rqHead = 0
	}
	x.rqN--
	need := verbs.GRHLen + len(pk.Payload)
	// Zero the slot, then store the fields: a composite literal would be
	// built on the stack field by field and copied in wide loads, which
	// stall on store forwarding.
	flags, imm := verbs.WCGRH, uint32(0)
	if pk.Opcode == rocev2.UDSendOnlyWithImm {
		flags, imm = verbs.WCGRH|verbs.WCWithImm, pk.Imm
	}
	wc := q.pendWC(x.recvCQ)
	*wc = verbs.WC{}
	wc.ID, wc.Opcode, wc.Flags, wc.ByteLen, wc.Imm = s.id, verbs.WCRecv, flags, uint32(need), imm
	wc.QPN, wc.SrcQP = verbs.QPN(x.qpn), verbs.QPN(pk.SrcQP)
	wc.Src.GID, wc.Src.Port = c.gid, c.port
	wc.Arrived = q.rxArrived
	if len(pk.Payload) == 0 && s.n == 1 && s.mr != nil && !s.mr.closed.Load() {
		// A header-only message into a one-SGE RECV: just the GRH.
		if dst, ok := s.mr.slice(s.sge.Addr, s.sge.Length); ok && len(dst) >= verbs.GRHLen {
			*(*[verbs.GRHLen]byte)(dst) = c.grh
			return
		}
	}
	if int(s.len) < need || !x.scatter(t, 0, c.grh[:], pk.Payload) {
		d.ctr.dropLength.Add(1)
		wc.Status = verbs.WCLocLenErr
	}
}

// responder is the receive side of a connected QP (UC and RC).
type responder struct {
	epsn  uint32 // expected PSN
	msn   uint32
	inMsg bool
	// SEND in progress: bytes received into the head RECV.
	off int
	// WRITE in progress.
	write bool
	wmr   *mr
	wva   uint64
	wleft uint32
	wlen  uint32

	nakSent    bool
	ackPending bool
	queued     bool // in the queue's ACK list

	atomics [16]atomicResult
	atomIdx int
}

type atomicResult struct {
	psn   uint32
	orig  uint64
	valid bool
}

func (r *responder) init() {}

func (r *responder) reset() {
	e := r.epsn
	*r = responder{epsn: e}
}

// checkRKey returns the region an incoming RDMA or atomic may touch, or
// nil when the R_Key, bounds, PD or access rights forbid it.
func (x *qp) checkRKey(rkey uint32, va uint64, n uint32, need verbs.Access) (*mr, []byte) {
	m := x.d.lookupMR(rkey, true)
	if m == nil || m.pd != x.pd || m.access&need != need || verbs.Access(x.access.Load())&need != need {
		return nil, nil
	}
	b, ok := m.slice(va, n)
	if !ok {
		return nil, nil
	}
	return m, b
}

// recvUC handles a UC packet. UC has no ACKs: a PSN gap abandons the
// message in progress, and the next FIRST or ONLY packet starts afresh.
func (x *qp) recvUC(pk *rocev2.Packet) {
	d := x.d
	x.rqMu.Lock()
	defer x.rqMu.Unlock()
	r := &x.resp
	op := pk.Opcode
	if op.IsStart() {
		r.inMsg = false
	} else if !r.inMsg || pk.PSN != r.epsn {
		r.inMsg = false
		d.ctr.dropPSN.Add(1)
		return
	}
	r.epsn = (pk.PSN + 1) & verbs.PSNMask
	if op.HasRETH() || (r.inMsg && r.write) || isWriteOp(op) {
		x.ucWrite(pk)
		return
	}
	// SEND.
	if op.IsStart() {
		if x.rqN == 0 {
			d.ctr.dropNoRecv.Add(1)
			x.noRecv.Add(1)
			return
		}
		r.inMsg, r.write, r.off = true, false, 0
	}
	if !x.scatter(x.rqHead, r.off, pk.Payload, nil) {
		r.inMsg = false
		d.ctr.dropLength.Add(1)
		s, _ := x.popRecv()
		x.recvCQ.push(&verbs.WC{ID: s.id, Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv, QPN: verbs.QPN(x.qpn)})
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
	}
}

func isWriteOp(op rocev2.Opcode) bool {
	o := op.Op()
	return o >= rocev2.OpWriteFirst && o <= rocev2.OpWriteOnlyWithImm
}

// ucWrite places one packet of a UC WRITE. Callers hold rqMu.
func (x *qp) ucWrite(pk *rocev2.Packet) {
	d := x.d
	r := &x.resp
	op := pk.Opcode
	if op.HasRETH() {
		m, _ := x.checkRKey(pk.RKey, pk.VA, pk.DMALen, verbs.AccessRemoteWrite)
		if m == nil {
			r.inMsg = false
			d.ctr.dropRKey.Add(1)
			return
		}
		r.inMsg, r.write, r.wmr, r.wva, r.wleft, r.wlen = true, true, m, pk.VA, pk.DMALen, pk.DMALen
	}
	n := uint32(len(pk.Payload))
	if n > r.wleft || (!op.IsEnd() && n != uint32(x.mtu)) {
		r.inMsg = false
		d.ctr.dropLength.Add(1)
		return
	}
	if dst, ok := r.wmr.slice(r.wva, n); ok {
		copy(dst, pk.Payload)
	}
	r.wva += uint64(n)
	r.wleft -= n
	if !op.IsEnd() {
		return
	}
	r.inMsg = false
	if op.HasImm() {
		s, ok := x.popRecv()
		if !ok {
			d.ctr.dropNoRecv.Add(1)
			x.noRecv.Add(1)
			return
		}
		x.recvCQ.push(&verbs.WC{ID: s.id, Opcode: verbs.WCRecvRDMAWithImm, Flags: verbs.WCWithImm,
			Imm: pk.Imm, ByteLen: r.wlen, QPN: verbs.QPN(x.qpn), Arrived: x.q.rxArrived})
	}
}
