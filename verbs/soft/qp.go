//go:build linux

package soft

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/seqd/seqd/verbs"
)

// recvSlot is a posted RECV. Its first SGE is kept in the slot, so that a
// one-SGE RECV (the common kind) is one small entry of the ring; further
// SGEs are in the QP's rqMore at the same index.
type recvSlot struct {
	id  uint64
	sge verbs.SGE
	// mr is sge's region, looked up when the RECV was posted (nil: look
	// up at use). A region closed since is seen by its closed flag.
	mr  *mr
	n   int32  // SGEs
	len uint32 // bytes, all SGEs together
}

// recvMore holds the SGEs of a RECV after its first, with their regions.
type recvMore struct {
	sg  [maxSGE - 1]verbs.SGE
	mrs [maxSGE - 1]*mr
}

// qp is a queue pair.
type qp struct {
	d      *device
	pd     *pd
	q      *queue
	qpn    uint32
	typ    verbs.QPType
	sendCQ *cq
	recvCQ *cq
	cap    verbs.QPCap
	sigAll bool
	idx    int

	state atomic.Uint32 // verbs.QPState

	// Attributes, set by Modify under mu; read by the data path, which
	// only runs once the QP has reached RTR/RTS. The Q_Key and the access
	// flags may change in RTS, while the data path reads them (a client
	// given a new answer Q_Key by the next leader): they are atomic.
	mu       sync.Mutex
	qkey     atomic.Uint32
	access   atomic.Uint32 // verbs.Access
	mtu      int
	destQPN  uint32
	peer     *peer
	timeout  uint8
	retryCnt uint8
	rnrRetry uint8
	rdAtomic uint8

	// Receive queue and responder state, under rqMu.
	rqMu   sync.Mutex
	rq     []recvSlot
	rqMore []recvMore // with rq, when RECVs may have several SGEs
	rqHead int
	rqN    int
	resp   responder

	// Requester state, under sqMu.
	sqMu sync.Mutex
	spsn uint32 // next PSN to send
	req  requester

	closed atomic.Bool

	noRecv atomic.Uint64 // SENDs dropped because no RECV was posted
}

var (
	_ verbs.QP       = (*qp)(nil)
	_ verbs.Counters = (*qp)(nil)
)

// VisitCounters reports this QP's own counts (a subset of the device's):
// verbs.CounterDropNoRecv. They stay readable after Close.
func (x *qp) VisitCounters(f func(name string, v uint64)) {
	f(verbs.CounterDropNoRecv, x.noRecv.Load())
}

func (p *pd) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	if p.closed.Load() {
		return nil, verbs.ErrClosed
	}
	d := p.d
	switch attr.Type {
	case verbs.RC, verbs.UC, verbs.UD:
	default:
		return nil, fmt.Errorf("%w: QP type %v", verbs.ErrInvalidArgument, attr.Type)
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil || scq.d != d || rcq.d != d {
		return nil, fmt.Errorf("%w: send and receive CQs must be CQs of this device", verbs.ErrInvalidArgument)
	}
	if scq.closed.Load() || rcq.closed.Load() {
		return nil, verbs.ErrClosed
	}
	c := attr.Cap
	if c.MaxSendWR <= 0 || c.MaxSendWR > 1<<15 || c.MaxRecvWR < 0 || c.MaxRecvWR > 1<<15 {
		return nil, fmt.Errorf("%w: QP capacities send %d recv %d (1..32768)", verbs.ErrInvalidArgument, c.MaxSendWR, c.MaxRecvWR)
	}
	if c.MaxSendSGE < 0 || c.MaxSendSGE > maxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > maxSGE {
		return nil, fmt.Errorf("%w: at most %d SGEs", verbs.ErrInvalidArgument, maxSGE)
	}
	if c.MaxInlineData < 0 || c.MaxInlineData > maxInline {
		return nil, fmt.Errorf("%w: at most %d bytes inline", verbs.ErrInvalidArgument, maxInline)
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	var q *queue
	want := -1 // the queue asked for (attr.Queue), if any
	if attr.Queue > 0 {
		want = (attr.Queue - 1) % len(d.queues)
		q = d.queues[want]
	} else {
		q = d.queues[int(d.rr.Add(1)-1)%len(d.queues)]
	}
	x := &qp{d: d, pd: p, q: q, typ: attr.Type, sendCQ: scq, recvCQ: rcq, cap: c, sigAll: attr.SigAll,
		rq: make([]recvSlot, max(c.MaxRecvWR, 1))}
	if c.MaxRecvSGE > 1 {
		x.rqMore = make([]recvMore, len(x.rq))
	}
	if attr.Type == verbs.RC {
		x.req.init(c.MaxSendWR)
		x.resp.init()
	}
	d.qpMu.Lock()
	idx := -1
	for i := 0; i < len(d.qps); i++ {
		j := (d.nextQP + i) % len(d.qps)
		if d.shared && want >= 0 && (qpnBase+j)%len(d.queues) != want {
			continue // steered by QPN: only these reach the queue asked for
		}
		if d.qps[j].Load() == nil {
			idx = j
			break
		}
	}
	if idx < 0 {
		d.qpMu.Unlock()
		return nil, fmt.Errorf("%w: device has %d QPs", verbs.ErrQueueFull, len(d.qps))
	}
	d.nextQP = idx + 1
	x.idx = idx
	x.qpn = uint32(qpnBase + idx)
	if d.shared {
		// The queues share one port: the kernel steers each packet to
		// queue DestQP mod queues (steerProgram).
		q = d.queues[x.qpn%uint32(len(d.queues))]
		x.q = q
	}
	d.qps[idx].Store(x)
	d.qpMu.Unlock()
	scq.attach(q, attr.Type == verbs.RC)
	rcq.attach(q, c.MaxRecvWR > 0) // a QP that takes no RECVs completes no receives
	p.nres.Add(1)
	return x, nil
}

func (x *qp) QPN() verbs.QPN       { return verbs.QPN(x.qpn) }
func (x *qp) Type() verbs.QPType   { return x.typ }
func (x *qp) State() verbs.QPState { return verbs.QPState(x.state.Load()) }

func (x *qp) Address() verbs.Address {
	return verbs.Address{GID: verbs.GIDFromAddr(x.q.local.Addr()), Port: x.q.local.Port()}
}

func (x *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if x.closed.Load() {
		return verbs.ErrClosed
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	cur := x.State()
	next, err := verbs.CheckModify(x.typ, cur, attr, mask)
	if err != nil {
		return err
	}
	if mask&verbs.AttrPort != 0 && attr.PortNum != 1 {
		return fmt.Errorf("%w: soft devices have one port, not %d", verbs.ErrInvalidArgument, attr.PortNum)
	}
	if mask&verbs.AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return fmt.Errorf("%w: P_Key index %d (the table holds only the default P_Key)", verbs.ErrInvalidArgument, attr.PKeyIndex)
	}
	var pe *peer
	if mask&verbs.AttrAV != 0 {
		if pe, err = x.q.newPeer(attr.AH.Dest); err != nil {
			return err
		}
	}
	if mask&verbs.AttrQKey != 0 {
		x.qkey.Store(attr.QKey)
	}
	if mask&verbs.AttrAccessFlags != 0 {
		x.access.Store(uint32(attr.AccessFlags))
	}
	if mask&verbs.AttrPathMTU != 0 {
		x.mtu = attr.PathMTU.Bytes()
	}
	if mask&verbs.AttrDestQPN != 0 {
		x.destQPN = uint32(attr.DestQPN)
	}
	if pe != nil {
		x.peer = pe
	}
	if mask&verbs.AttrRQPSN != 0 {
		x.rqMu.Lock()
		x.resp.epsn = uint32(attr.RQPSN)
		x.rqMu.Unlock()
	}
	if mask&verbs.AttrSQPSN != 0 {
		x.sqMu.Lock()
		x.spsn = uint32(attr.SQPSN)
		x.req.reset(x.spsn)
		x.sqMu.Unlock()
	}
	if mask&verbs.AttrTimeout != 0 {
		x.timeout = attr.Timeout
	}
	if mask&verbs.AttrRetryCnt != 0 {
		x.retryCnt = attr.RetryCnt
	}
	if mask&verbs.AttrRNRRetry != 0 {
		x.rnrRetry = attr.RNRRetry
	}
	if mask&verbs.AttrMaxQPRdAtomic != 0 {
		x.rdAtomic = attr.MaxRdAtomic
	}
	if x.mtu == 0 {
		x.mtu = activeMTU.Bytes()
	}
	switch next {
	case verbs.StateReset:
		x.state.Store(uint32(next))
		x.flushAll(false)
	case verbs.StateErr:
		x.state.Store(uint32(next))
		x.flushAll(true)
	default:
		x.state.Store(uint32(next))
	}
	if x.typ == verbs.RC && next == verbs.StateRTR && cur == verbs.StateInit {
		x.q.rxMu.Lock()
		if _, ok := x.q.rcPeers[x]; !ok {
			x.q.rcPeers[x] = struct{}{}
			x.q.nrc.Add(1)
		}
		x.q.rxMu.Unlock()
	}
	return nil
}

// flushAll empties the work queues: into WR_FLUSH_ERR completions when
// moving to ERR (as hardware does), silently when moving to RESET.
func (x *qp) flushAll(complete bool) {
	// Completions a receive burst has batched go first, so that a QP's
	// completions stay in order.
	x.q.rxMu.Lock()
	defer x.q.rxMu.Unlock()
	x.q.flushPend()
	x.rqMu.Lock()
	for x.rqN > 0 {
		s := &x.rq[x.rqHead]
		if complete {
			x.recvCQ.push(&verbs.WC{ID: s.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: verbs.QPN(x.qpn)})
		}
		x.rqHead = (x.rqHead + 1) % len(x.rq)
		x.rqN--
	}
	x.resp.reset()
	x.rqMu.Unlock()
	if x.typ == verbs.RC {
		x.sqMu.Lock()
		x.req.flush(x, complete)
		x.sqMu.Unlock()
	}
}

func (x *qp) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if x.closed.Load() {
		return 0, verbs.ErrClosed
	}
	st := x.State()
	if st == verbs.StateReset {
		return 0, fmt.Errorf("%w: post recv in %v", verbs.ErrQPState, st)
	}
	x.rqMu.Lock()
	defer x.rqMu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SG) > x.cap.MaxRecvSGE {
			return i, fmt.Errorf("%w: recv WR %d has %d SGEs, QP takes %d", verbs.ErrInvalidArgument, i, len(wr.SG), x.cap.MaxRecvSGE)
		}
		if x.rqN == len(x.rq) || x.cap.MaxRecvWR == 0 {
			return i, fmt.Errorf("%w: receive queue holds %d", verbs.ErrQueueFull, x.cap.MaxRecvWR)
		}
		t := x.rqHead + x.rqN
		if t >= len(x.rq) {
			t -= len(x.rq)
		}
		s := &x.rq[t]
		// Applications re-post the same buffers: a one-SGE RECV naming what
		// the slot named last time, in a region still registered, was
		// checked then.
		if !(len(wr.SG) == 1 && s.n == 1 && s.sge == wr.SG[0] && s.mr != nil && !s.mr.closed.Load()) {
			var mrs [maxSGE]*mr
			total := uint64(0)
			for j := range wr.SG {
				m, err := x.checkSGE(&wr.SG[j], verbs.AccessLocalWrite)
				if err != nil {
					return i, fmt.Errorf("recv WR %d SGE %d: %w", i, j, err)
				}
				mrs[j] = m
				total += uint64(wr.SG[j].Length)
			}
			if total > 1<<31 {
				return i, fmt.Errorf("%w: recv WR %d of %d bytes", verbs.ErrInvalidArgument, i, total)
			}
			s.n, s.len, s.sge, s.mr = int32(len(wr.SG)), uint32(total), verbs.SGE{}, nil
			if len(wr.SG) > 0 {
				s.sge, s.mr = wr.SG[0], mrs[0]
			}
			if len(wr.SG) > 1 {
				mo := &x.rqMore[t]
				copy(mo.sg[:], wr.SG[1:])
				copy(mo.mrs[:], mrs[1:len(wr.SG)])
			}
		}
		if st == verbs.StateErr {
			x.recvCQ.push(&verbs.WC{ID: wr.ID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: verbs.QPN(x.qpn)})
			continue
		}
		s.id = wr.ID
		x.rqN++
	}
	return len(wrs), nil
}

// checkSGE checks that sge names memory of a live region of this QP's PD
// with the given access, and returns the region.
func (x *qp) checkSGE(sge *verbs.SGE, need verbs.Access) (*mr, error) {
	m := x.d.lookupMR(sge.LKey, false)
	if m == nil || m.pd != x.pd {
		return nil, fmt.Errorf("%w: bad lkey 0x%x", verbs.ErrInvalidArgument, sge.LKey)
	}
	if m.access&need != need {
		return nil, fmt.Errorf("%w: lkey 0x%x lacks access 0x%x", verbs.ErrInvalidArgument, sge.LKey, uint32(need))
	}
	if _, ok := m.slice(sge.Addr, sge.Length); !ok {
		return nil, fmt.Errorf("%w: SGE [0x%x,+%d) outside its region", verbs.ErrInvalidArgument, sge.Addr, sge.Length)
	}
	return m, nil
}

func (x *qp) Close() error {
	if x.closed.Swap(true) {
		return verbs.ErrClosed
	}
	x.state.Store(uint32(verbs.StateErr))
	x.q.rxMu.Lock()
	if _, ok := x.q.rcPeers[x]; ok {
		delete(x.q.rcPeers, x)
		x.q.nrc.Add(-1)
	}
	x.q.rxMu.Unlock()
	x.sqMu.Lock()
	if x.req.inflight() {
		x.q.active.Add(-1)
	}
	x.req.reset(0)
	x.sqMu.Unlock()
	d := x.d
	d.qpMu.Lock()
	d.qps[x.idx].Store(nil)
	d.qpMu.Unlock()
	x.sendCQ.nqp.Add(-1)
	x.recvCQ.nqp.Add(-1)
	x.pd.nres.Add(-1)
	return nil
}

// popRecv removes the head receive WR. Callers hold rqMu.
func (x *qp) popRecv() (recvSlot, bool) {
	if x.rqN == 0 {
		return recvSlot{}, false
	}
	s := x.rq[x.rqHead]
	x.rqHead++
	if x.rqHead == len(x.rq) {
		x.rqHead = 0
	}
	x.rqN--
	return s, true
}

// scatter writes a then b into the buffers of the RECV at rq[t], starting
// at byte off of it. It reports false if they do not fit or a buffer is
// gone.
func (x *qp) scatter(t int, off int, a, b []byte) bool {
	s := &x.rq[t]
	for i := 0; i < int(s.n) && (len(a) > 0 || len(b) > 0); i++ {
		sge, m := &s.sge, s.mr
		if i > 0 {
			mo := &x.rqMore[t]
			sge, m = &mo.sg[i-1], mo.mrs[i-1]
		}
		if !x.scatterSGE(sge, m, &off, &a, &b) {
			return false
		}
	}
	return len(a) == 0 && len(b) == 0
}

// scatterSGE writes what it can of a then b into one SGE (of region m, or
// nil: look it up), from byte *off of it, and advances them. It reports
// false if the buffer is gone.
func (x *qp) scatterSGE(sge *verbs.SGE, m *mr, off *int, a, b *[]byte) bool {
	if *off >= int(sge.Length) {
		*off -= int(sge.Length)
		return true
	}
	if m == nil {
		m = x.d.lookupMR(sge.LKey, false)
	} else if m.closed.Load() {
		m = nil
	}
	if m == nil {
		return false
	}
	dst, ok := m.slice(sge.Addr, sge.Length)
	if !ok {
		return false
	}
	dst = dst[*off:]
	*off = 0
	n := copy(dst, *a)
	*a = (*a)[n:]
	dst = dst[n:]
	if len(*a) == 0 {
		n = copy(dst, *b)
		*b = (*b)[n:]
	}
	return true
}
