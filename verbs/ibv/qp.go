//go:build ibverbs && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/seqd/seqd/verbs"
)

var _ verbs.QP = (*qp)(nil)

// qp is an ibv_qp with preallocated C arrays of work requests and SGEs,
// sized to its capacities: a post fills them in place and crosses into C
// once.
type qp struct {
	pd       *pd
	scq, rcq *cq
	q        *C.struct_seqd_qp
	qpn      verbs.QPN
	typ      verbs.QPType
	caps     verbs.QPCap // as granted by the driver

	swr  []C.struct_seqd_swr    // q.swr
	ssge []C.struct_ibv_sge     // q.ssge
	rwr  []C.struct_ibv_recv_wr // q.rwrs
	rsge []C.struct_ibv_sge     // q.rsge

	// Lock order: modMu, sendMu, recvMu; a CQ's qpsMu comes before
	// recvMu.
	modMu  sync.Mutex
	sendMu sync.Mutex
	recvMu sync.Mutex
	state  atomic.Uint32 // verbs.QPState, as last set by Modify
	closed atomic.Bool

	// UD only, under recvMu: where each posted receive's buffer starts,
	// in posting order (UD receives complete in order), so that Poll
	// can read the sender's address from the GRH.
	ring       []recvSlot
	head, tail uint64
}

type recvSlot struct {
	id uint64
	// grh are the SGEs that hold the first 40 bytes of the receive, where
	// the NIC writes the GRH ("in the first 40 bytes of the buffer(s) in
	// the scatter list", ibv_post_recv(3)): several when the first SGEs
	// are shorter. ngrh is 0 when the receive had no buffer or its SGEs
	// hold less than 40 bytes, or take more than maxGRHSGE to.
	grh  [maxGRHSGE]verbs.SGE
	ngrh uint8
}

// CreateQP creates a queue pair in the RESET state. The driver may grant
// larger capacities than asked; the QP uses what it grants.
func (p *pd) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	typ, ok := qpTypes[attr.Type]
	if !ok {
		return nil, fmt.Errorf("%w: QP type %v", verbs.ErrInvalidArgument, attr.Type)
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, fmt.Errorf("%w: QP needs a send and a receive CQ of the ibv provider", verbs.ErrInvalidArgument)
	}
	if scq.dev != p.dev || rcq.dev != p.dev {
		return nil, fmt.Errorf("%w: CQ of another device", verbs.ErrInvalidArgument)
	}
	c := attr.Cap
	for _, v := range []int{c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE, c.MaxInlineData} {
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("%w: QP capacities %+v", verbs.ErrInvalidArgument, c)
		}
	}
	if err := p.life.acquire("ibv PD"); err != nil {
		return nil, err
	}
	if err := scq.life.acquire("ibv send CQ"); err != nil {
		p.life.release()
		return nil, err
	}
	if err := rcq.life.acquire("ibv receive CQ"); err != nil {
		scq.life.release()
		p.life.release()
		return nil, err
	}
	q, err := p.createQP(typ, attr, scq, rcq)
	if err != nil {
		rcq.life.release()
		scq.life.release()
		p.life.release()
		return nil, err
	}
	return q, nil
}

func (p *pd) createQP(typ C.enum_ibv_qp_type, attr verbs.QPInitAttr, scq, rcq *cq) (*qp, error) {
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.c.cq
	ia.recv_cq = rcq.c.cq
	ia.qp_type = typ
	ia.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	if attr.SigAll {
		ia.sq_sig_all = 1
	}
	iqp, errno := C.ibv_create_qp(p.pd, &ia)
	if iqp == nil {
		return nil, fmt.Errorf("ibv: ibv_create_qp %v %+v: %w", attr.Type, attr.Cap, errnoErr(errno))
	}
	caps := verbs.QPCap{
		MaxSendWR:     int(ia.cap.max_send_wr),
		MaxRecvWR:     int(ia.cap.max_recv_wr),
		MaxSendSGE:    int(ia.cap.max_send_sge),
		MaxRecvSGE:    int(ia.cap.max_recv_sge),
		MaxInlineData: int(ia.cap.max_inline_data),
	}
	q := newQP(p, scq, rcq, iqp, attr.Type, caps)
	if q == nil {
		C.ibv_destroy_qp(iqp)
		return nil, fmt.Errorf("ibv: QP work request arrays: out of memory")
	}
	return q, nil
}

// newQP wraps iqp, preallocating its work request arrays, and makes rcq
// find it. It returns nil when out of memory.
func newQP(p *pd, scq, rcq *cq, iqp *C.struct_ibv_qp, typ verbs.QPType, caps verbs.QPCap) *qp {
	sq := C.seqd_qp_alloc(iqp, C.int(caps.MaxSendWR), C.int(caps.MaxSendSGE), C.int(caps.MaxRecvWR), C.int(caps.MaxRecvSGE))
	if sq == nil {
		return nil
	}
	q := &qp{
		pd: p, scq: scq, rcq: rcq, q: sq,
		qpn:  verbs.QPN(iqp.qp_num),
		typ:  typ,
		caps: caps,
		swr:  unsafe.Slice(sq.swr, int(sq.send_wr))[:caps.MaxSendWR],
		ssge: unsafe.Slice(sq.ssge, int(sq.send_wr)*int(sq.send_sge)),
		rwr:  unsafe.Slice(sq.rwrs, int(sq.recv_wr))[:caps.MaxRecvWR],
		rsge: unsafe.Slice(sq.rsge, int(sq.recv_wr)*int(sq.recv_sge)),
	}
	if q.typ == verbs.UD {
		n := 1
		for n < 2*caps.MaxRecvWR {
			n <<= 1
		}
		q.ring = make([]recvSlot, n)
	}
	rcq.qpsMu.Lock()
	rcq.qps[uint32(q.qpn)] = q
	rcq.qpsMu.Unlock()
	p.dev.addQP(q)
	return q
}

func (q *qp) QPN() verbs.QPN         { return q.qpn }
func (q *qp) Type() verbs.QPType     { return q.typ }
func (q *qp) Address() verbs.Address { return q.pd.dev.addr }

// State returns the state the QP was last moved to by Modify. A NIC that
// moves a QP to ERR on its own says so through flushed completions.
func (q *qp) State() verbs.QPState { return verbs.QPState(q.state.Load()) }

// Modify validates the call with verbs.CheckModify, then applies it with
// ibv_modify_qp. See device.fillAH for how AttrAV's fields are defaulted
// and device.physPort for port numbers.
func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.modMu.Lock()
	defer q.modMu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("%w: ibv QP", verbs.ErrClosed)
	}
	cur := q.State()
	next, err := verbs.CheckModify(q.typ, cur, attr, mask)
	if err != nil {
		return err
	}
	cmask, err := attrMaskToC(mask)
	if err != nil {
		return err
	}
	var a C.struct_ibv_qp_attr
	if mask&verbs.AttrState != 0 {
		s, ok := qpStateToC(attr.State)
		if !ok {
			return fmt.Errorf("%w: QP state %v", verbs.ErrInvalidArgument, attr.State)
		}
		a.qp_state = s
	}
	if mask&verbs.AttrAccessFlags != 0 {
		acc, err := accessToC(attr.AccessFlags)
		if err != nil {
			return err
		}
		a.qp_access_flags = C.uint(acc)
	}
	if mask&verbs.AttrPathMTU != 0 {
		m, ok := mtuToC(attr.PathMTU)
		if !ok {
			return fmt.Errorf("%w: path MTU %d", verbs.ErrInvalidArgument, attr.PathMTU)
		}
		a.path_mtu = m
	}
	if mask&verbs.AttrAV != 0 {
		q.pd.dev.fillAH(&a.ah_attr, attr.AH)
	}
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.port_num = q.pd.dev.physPort(attr.PortNum)
	a.qkey = C.uint32_t(attr.QKey)
	a.dest_qp_num = C.uint32_t(attr.DestQPN)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	if rc, errno := C.ibv_modify_qp(q.q.qp, &a, cmask); rc != 0 {
		return fmt.Errorf("ibv: ibv_modify_qp %v %v→%v: %w", q.qpn, cur, next, rcErr(rc, errno))
	}
	q.state.Store(uint32(next))
	if next == verbs.StateReset {
		q.recvMu.Lock()
		q.head, q.tail = 0, 0
		q.recvMu.Unlock()
	}
	return nil
}

// PostSend posts wrs as one chain with one ibv_post_send. Requests the
// provider can tell are bad end the chain before the call; the driver's
// bad_wr ends it after. It allocates nothing unless it fails.
func (q *qp) PostSend(wrs []verbs.SendWR) (int, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	n, stop := q.fillSend(wrs)
	if n == 0 {
		return 0, stop
	}
	q.pd.dev.crossings.Add(1)
	if rc := C.seqd_post_send(q.q, C.int(n)); rc != 0 {
		bad := int(q.q.bad)
		return bad, fmt.Errorf("ibv: ibv_post_send work request %d: %w", bad, postErr(rc))
	}
	return n, stop
}

// fillSend checks wrs and converts the longest good prefix into the QP's C
// arrays: its length, and the error that ended it early. Callers hold
// sendMu.
func (q *qp) fillSend(wrs []verbs.SendWR) (int, error) {
	if q.closed.Load() {
		return 0, fmt.Errorf("%w: ibv QP", verbs.ErrClosed)
	}
	switch s := q.State(); s {
	case verbs.StateReset, verbs.StateInit, verbs.StateRTR:
		return 0, fmt.Errorf("%w: PostSend on a QP in %v", verbs.ErrQPState, s)
	}
	n := len(wrs)
	var stop error
	if n > len(q.swr) {
		n = len(q.swr)
		stop = fmt.Errorf("%w: chain of %d send work requests, the send queue holds %d", verbs.ErrQueueFull, len(wrs), len(q.swr))
	}
	// The last check before the doorbell: a send whose deadline
	// (verbs.SendWR.Deadline) has passed ends the chain, refused.
	var now verbs.Time
	for i := range wrs[:n] {
		if d := wrs[i].Deadline; d != 0 {
			if now == 0 {
				now = verbs.Now()
			}
			if now > d {
				n, stop = i, fmt.Errorf("send work request %d: %w", i, verbs.ErrDeadline)
				break
			}
		}
	}
	sg := 0
	for i := 0; i < n; i++ {
		w := &wrs[i]
		h, err := q.checkSend(w)
		if err != nil {
			n, stop = i, fmt.Errorf("send work request %d: %w", i, err)
			break
		}
		d := &q.swr[i]
		d.wr_id = C.uint64_t(w.ID)
		d.opcode = opcodes[w.Opcode]
		d.send_flags = sendFlags[w.Flags]
		d.imm = C.uint32_t(w.Imm)
		d.remote_addr = C.uint64_t(w.RemoteAddr)
		d.rkey = C.uint32_t(w.RKey)
		d.compare_add = C.uint64_t(w.CompareAdd)
		d.swap = C.uint64_t(w.Swap)
		d.ah = nil
		if h != nil {
			d.ah = h.ah
			d.remote_qpn = C.uint32_t(w.RemoteQPN)
			d.remote_qkey = C.uint32_t(w.RemoteQKey)
		}
		d.sge_off = C.uint32_t(sg)
		d.num_sge = C.uint32_t(len(w.SG))
		for j := range w.SG {
			s := &q.ssge[sg+j]
			s.addr = C.uint64_t(w.SG[j].Addr)
			s.length = C.uint32_t(w.SG[j].Length)
			s.lkey = C.uint32_t(w.SG[j].LKey)
		}
		sg += len(w.SG)
	}
	return n, stop
}

// checkSend refuses what the driver would refuse less clearly, or not at
// all. It returns the UD destination's AH.
func (q *qp) checkSend(w *verbs.SendWR) (*ah, error) {
	if w.Opcode < verbs.OpSend || int(w.Opcode) >= len(opcodes) {
		return nil, fmt.Errorf("%w: opcode %v", verbs.ErrInvalidArgument, w.Opcode)
	}
	if int(w.Flags) >= len(sendFlags) {
		return nil, fmt.Errorf("%w: send flags 0x%x", verbs.ErrInvalidArgument, uint8(w.Flags))
	}
	if len(w.SG) > q.caps.MaxSendSGE {
		return nil, fmt.Errorf("%w: %d SGEs, the QP takes %d", verbs.ErrInvalidArgument, len(w.SG), q.caps.MaxSendSGE)
	}
	if w.Flags&verbs.Inline != 0 {
		total := 0
		for _, s := range w.SG {
			total += int(s.Length)
		}
		if total > q.caps.MaxInlineData {
			return nil, fmt.Errorf("%w: %d bytes inline, the QP takes %d", verbs.ErrInvalidArgument, total, q.caps.MaxInlineData)
		}
	}
	switch w.Opcode {
	case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
		if len(w.SG) != 1 || w.SG[0].Length != 8 || w.RemoteAddr%8 != 0 {
			return nil, fmt.Errorf("%w: %v needs one 8-byte SGE and an 8-byte aligned remote address", verbs.ErrInvalidArgument, w.Opcode)
		}
	}
	switch q.typ {
	case verbs.UD:
		if w.Opcode != verbs.OpSend && w.Opcode != verbs.OpSendWithImm {
			return nil, fmt.Errorf("%w: %v on a UD QP", verbs.ErrInvalidArgument, w.Opcode)
		}
		h, ok := w.AH.(*ah)
		if !ok || h == nil || h.pd != q.pd {
			return nil, fmt.Errorf("%w: UD send needs an address handle of the QP's PD", verbs.ErrInvalidArgument)
		}
		if h.closed.Load() {
			return nil, fmt.Errorf("%w: address handle", verbs.ErrClosed)
		}
		if w.RemoteQPN > verbs.MaxQPN {
			return nil, fmt.Errorf("%w: remote %v", verbs.ErrInvalidArgument, w.RemoteQPN)
		}
		return h, nil
	case verbs.UC:
		switch w.Opcode {
		case verbs.OpRDMARead, verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
			return nil, fmt.Errorf("%w: %v on a UC QP", verbs.ErrInvalidArgument, w.Opcode)
		}
	}
	return nil, nil
}

// PostRecv posts wrs as one chain with one ibv_post_recv.
func (q *qp) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	n, stop := q.fillRecv(wrs)
	if n == 0 {
		return 0, stop
	}
	posted, err := n, stop
	q.pd.dev.crossings.Add(1)
	if rc := C.seqd_post_recv(q.q, C.int(n)); rc != 0 {
		posted = int(q.q.bad)
		err = fmt.Errorf("ibv: ibv_post_recv work request %d: %w", posted, postErr(rc))
	}
	q.recordRecvs(wrs[:posted])
	return posted, err
}

// fillRecv is fillSend for receives. Callers hold recvMu.
func (q *qp) fillRecv(wrs []verbs.RecvWR) (int, error) {
	if q.closed.Load() {
		return 0, fmt.Errorf("%w: ibv QP", verbs.ErrClosed)
	}
	if s := q.State(); s == verbs.StateReset {
		return 0, fmt.Errorf("%w: PostRecv on a QP in %v", verbs.ErrQPState, s)
	}
	n := len(wrs)
	var stop error
	if n > len(q.rwr) {
		n = len(q.rwr)
		stop = fmt.Errorf("%w: chain of %d receive work requests, the receive queue holds %d", verbs.ErrQueueFull, len(wrs), len(q.rwr))
	}
	sg := 0
	for i := 0; i < n; i++ {
		w := &wrs[i]
		if len(w.SG) > q.caps.MaxRecvSGE {
			n, stop = i, fmt.Errorf("receive work request %d: %w: %d SGEs, the QP takes %d", i, verbs.ErrInvalidArgument, len(w.SG), q.caps.MaxRecvSGE)
			break
		}
		r := &q.rwr[i]
		r.wr_id = C.uint64_t(w.ID)
		r.num_sge = C.int(len(w.SG))
		r.sg_list = nil
		if len(w.SG) > 0 {
			r.sg_list = &q.rsge[sg] // C memory
		}
		for j := range w.SG {
			s := &q.rsge[sg+j]
			s.addr = C.uint64_t(w.SG[j].Addr)
			s.length = C.uint32_t(w.SG[j].Length)
			s.lkey = C.uint32_t(w.SG[j].LKey)
		}
		sg += len(w.SG)
	}
	return n, stop
}

// recordRecvs notes where the posted receives' GRHs go (UD). Callers hold
// recvMu.
func (q *qp) recordRecvs(wrs []verbs.RecvWR) {
	if q.ring != nil {
		for i := range wrs {
			s := recvSlot{id: wrs[i].ID}
			s.grh, s.ngrh = grhSGEs(wrs[i].SG)
			if q.tail-q.head == uint64(len(q.ring)) {
				q.head++ // cannot happen while the driver keeps its capacity
			}
			q.ring[q.tail%uint64(len(q.ring))] = s
			q.tail++
		}
	}
}

var _ verbs.BatchPoster = (*qp)(nil)

// PostBatch implements verbs.BatchPoster: it posts recvs to q and sends
// to sq (a QP of the same device, or q itself) with one cgo call, one
// ibv_post_recv and one ibv_post_send: a server's or client's loop then
// crosses into C twice per batch, this and one Poll of a shared CQ.
func (q *qp) PostBatch(recvs []verbs.RecvWR, sqi verbs.QP, sends []verbs.SendWR) (nr, ns int, err error) {
	sq, ok := sqi.(*qp)
	if !ok || sq == nil || sq.pd.dev != q.pd.dev {
		return 0, 0, fmt.Errorf("%w: PostBatch needs a send QP of the same ibv device", verbs.ErrInvalidArgument)
	}
	sq.sendMu.Lock()
	defer sq.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	nr, rstop := 0, error(nil)
	if len(recvs) > 0 {
		nr, rstop = q.fillRecv(recvs)
	}
	ns, sstop := 0, error(nil)
	if len(sends) > 0 {
		ns, sstop = sq.fillSend(sends)
	}
	if nr == 0 && ns == 0 {
		return 0, 0, errors.Join(rstop, sstop)
	}
	var rrq, rsq *C.struct_seqd_qp
	if nr > 0 {
		rrq = q.q
	}
	if ns > 0 {
		rsq = sq.q
	}
	q.pd.dev.crossings.Add(1)
	var which C.int
	rc := C.seqd_post_both(rrq, C.int(nr), rsq, C.int(ns), &which)
	switch {
	case rc != 0 && which == 0:
		bad := int(q.q.bad)
		q.recordRecvs(recvs[:bad])
		return bad, 0, fmt.Errorf("ibv: ibv_post_recv work request %d: %w", bad, postErr(rc))
	case rc != 0:
		q.recordRecvs(recvs[:nr])
		bad := int(sq.q.bad)
		return nr, bad, errors.Join(rstop, fmt.Errorf("ibv: ibv_post_send work request %d: %w", bad, postErr(rc)))
	}
	q.recordRecvs(recvs[:nr])
	return nr, ns, errors.Join(rstop, sstop)
}

// completeRecv fills w.Src of a UD receive completion from the GRH of its
// buffer. Poll calls it for every completion of the QP on c, a CQ the QP
// receives into, with c.qpsMu held.
func (q *qp) completeRecv(c *cq, w *verbs.WC, slid uint16) {
	if q.ring == nil {
		return
	}
	success := w.Status == verbs.WCSuccess
	isRecv := c != q.scq || (success && (w.Opcode == verbs.WCRecv || w.Opcode == verbs.WCRecvRDMAWithImm))
	q.recvMu.Lock()
	var s recvSlot
	found := false
	if q.head != q.tail {
		h := q.ring[q.head%uint64(len(q.ring))]
		// On a shared CQ an error completion has no reliable opcode:
		// take it as the oldest receive only if the IDs agree.
		if isRecv || h.id == w.ID {
			s, found = h, true
			q.head++
		}
	}
	q.recvMu.Unlock()
	if !found || !success || s.ngrh == 0 || w.Flags&verbs.WCGRH == 0 {
		return
	}
	var grh [verbs.GRHLen]byte
	if !q.pd.grh(&grh, s.grh[:s.ngrh]) {
		return
	}
	if g, ok := grhSource(grh[:]); ok {
		w.Src = verbs.Address{GID: g, LID: slid}
	}
}

// Close destroys the QP. Posts in progress finish first.
func (q *qp) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: ibv QP already closed", verbs.ErrClosed)
	}
	// Leave the CQ's index before taking recvMu (lock order).
	q.rcq.qpsMu.Lock()
	delete(q.rcq.qps, uint32(q.qpn))
	q.rcq.qpsMu.Unlock()
	if err := q.destroy(); err != nil {
		q.closed.Store(false)
		q.rcq.qpsMu.Lock()
		q.rcq.qps[uint32(q.qpn)] = q
		q.rcq.qpsMu.Unlock()
		return err
	}
	q.pd.dev.removeQP(q)
	q.rcq.life.release()
	q.scq.life.release()
	q.pd.life.release()
	return nil
}

func (q *qp) destroy() error {
	q.modMu.Lock()
	defer q.modMu.Unlock()
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if rc, errno := C.ibv_destroy_qp(q.q.qp); rc != 0 {
		return fmt.Errorf("ibv: ibv_destroy_qp: %w", rcErr(rc, errno))
	}
	C.seqd_qp_free(q.q)
	q.q, q.swr, q.ssge, q.rwr, q.rsge = nil, nil, nil, nil, nil
	return nil
}

// postErr maps the errno of ibv_post_send/ibv_post_recv: drivers say
// ENOMEM for a full queue and EINVAL for a malformed request.
func postErr(rc C.int) error {
	e := syscall.Errno(rc)
	if rc < 0 {
		e = syscall.Errno(-rc)
	}
	if e == syscall.ENOMEM {
		return fmt.Errorf("%w: %s", verbs.ErrQueueFull, errnoString(e))
	}
	return errnoErr(e)
}
