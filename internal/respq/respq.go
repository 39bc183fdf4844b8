// Package respq is a worker's set of UD response queue pairs, shared by
// the modes that answer with SENDs (headeronly, herd): the answers of one
// batch are posted as one chain (one doorbell) on one QP, and successive
// batches rotate over the QPs (the thesis's multi-queue, §3.7). Sends are
// signaled selectively, every SignalEvery-th work request, and a signaled
// completion frees its slot and every slot before it, as on hardware. Each
// QP has a ring of payload slots in a registered region, one per send
// queue entry, for answers that carry bytes.
//
// The send CQ may be shared with the worker's request QPs (Config.Shared):
// the worker then polls one CQ for requests and send completions, hands
// the latter to Complete, and posts a batch's receives and answers with
// one provider call (Batch.PostMany), two crossings into the provider per
// batch. Completions that a wait for send queue room polls and that are
// not the set's are kept for the worker (Spilled).
//
// A Set is owned by one worker goroutine and is not safe for concurrent
// use.
package respq

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/seqd/seqd/verbs"
)

// Config sizes a Set.
type Config struct {
	PD          verbs.PD
	CQ          verbs.CQ // the send CQ of every QP in the set
	QPs         int      // Q, the number of response QPs
	Depth       int      // send queue entries per QP
	SignalEvery int      // signal every k-th work request
	SlotLen     int      // payload bytes per send queue entry
	QKey        uint32
	Batch       int // largest chain; sizes the completion buffer
	// Shared: CQ also takes the completions of other QPs (the worker's
	// requests), which Reap keeps for Spilled instead of dropping.
	Shared bool
	// Device the QPs are on, for Batch.PostMany (nil: one call per chain).
	Device verbs.Device
	// Queue, when set, gives each new QP's verbs.QPInitAttr.Queue (the
	// device engine it uses).
	Queue func() int
}

type queue struct {
	qp        verbs.QP
	mr        verbs.MR
	posted    uint64
	completed uint64
	// weight of each send queue slot's answer (Batch.Weigh): how many
	// values it carries, so that a failed one is counted in values;
	// nil: one each.
	weight []uint32
}

// Set is the response QPs of one worker.
type Set struct {
	cfg Config
	// sigMask is SignalEvery-1 when SignalEvery is a power of two (the
	// default), 0 otherwise: Prepare then masks instead of dividing (a
	// 64-bit DIV per answer was a tenth of the answer loop's samples).
	sigMask uint64
	qs      []queue
	qpns    []verbs.QPN // of qs, for Complete
	next    int
	wcs     []verbs.WC
	spill   []verbs.WC // others' completions Reap polled from a shared CQ
	// failed and late count the failed completions Next reaped while it
	// waited, unsent their values, for TakeFailed.
	failed, late, unsent int
}

// MaxQPs is the most response QPs a Set holds.
const MaxQPs = 255

// New creates the QPs, brings them to RTS and registers their payload
// rings. On error it releases what it made.
func New(c Config) (s *Set, err error) {
	if c.QPs < 1 || c.Depth < 2 || c.SignalEvery < 1 || c.SignalEvery >= c.Depth || c.SlotLen < 0 || c.QPs > MaxQPs {
		return nil, fmt.Errorf("respq: invalid config %+v", c)
	}
	s = &Set{cfg: c, wcs: make([]verbs.WC, max(c.Batch, 16))}
	if k := c.SignalEvery; k > 1 && k&(k-1) == 0 {
		s.sigMask = uint64(k - 1)
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for r := range c.QPs {
		engine := 0
		if c.Queue != nil {
			engine = c.Queue()
		}
		qp, err := c.PD.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: c.CQ, RecvCQ: c.CQ, Queue: engine,
			Cap: verbs.QPCap{MaxSendWR: c.Depth, MaxRecvWR: 0, MaxSendSGE: 1, MaxRecvSGE: 0, MaxInlineData: c.SlotLen}})
		if err != nil {
			return nil, fmt.Errorf("respq: response QP %d: %w", r, err)
		}
		s.qs = append(s.qs, queue{qp: qp})
		s.qpns = append(s.qpns, qp.QPN())
		if err := verbs.BringUpUD(qp, c.QKey, 0); err != nil {
			return nil, fmt.Errorf("respq: response QP %d bring-up: %w", r, err)
		}
		if c.SlotLen > 0 {
			if s.qs[r].mr, err = c.PD.RegMR(c.Depth*c.SlotLen, 0); err != nil {
				return nil, fmt.Errorf("respq: response buffers: %w", err)
			}
		}
	}
	return s, nil
}

// Batch is the response QP one batch of answers goes out on.
type Batch struct {
	s  *Set
	qi int
	q  *queue
}

// Next picks the QP for the next batch, round robin, once its send queue
// has room for n work requests. It reports false when the queue did not
// drain within a second (the batch must then be dropped).
func (s *Set) Next(n int) (Batch, bool) {
	qi := s.next
	s.next = (s.next + 1) % len(s.qs)
	q := &s.qs[qi]
	depth := uint64(s.cfg.Depth)
	var deadline time.Time
	for q.posted-q.completed+uint64(n) > depth-1 {
		got, failed, late, unsent := s.Reap()
		s.failed += failed
		s.late += late
		s.unsent += unsent
		if got == 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(time.Second)
			} else if time.Now().After(deadline) {
				return Batch{}, false
			}
			runtime.Gosched()
		}
	}
	return Batch{s: s, qi: qi, q: q}, true
}

// Prepare sets the work request IDs and signaling of the batch's chain
// wrs (wrs[i] is its i-th request), keeping the caller's other fields
// and flags.
func (b Batch) Prepare(wrs []verbs.SendWR) {
	seq, qi := b.q.posted, uint64(b.qi)
	m, every := b.s.sigMask, uint64(b.s.cfg.SignalEvery)
	for i := range wrs {
		wr := &wrs[i]
		wr.ID = seq<<8 | qi
		wr.Flags &^= verbs.Signaled
		if m != 0 && seq&m == m || m == 0 && seq%every == every-1 {
			wr.Flags |= verbs.Signaled
		}
		seq++
	}
}

// Slot returns the payload slot of the i-th request of the batch and the
// SGE that names it.
func (b Batch) Slot(i int) ([]byte, verbs.SGE) {
	seq := b.q.posted + uint64(i)
	l := uint64(b.s.cfg.SlotLen)
	off := (seq % uint64(b.s.cfg.Depth)) * l
	return b.q.mr.Bytes()[off : off+l], verbs.SGE{Addr: b.q.mr.Addr() + off, Length: uint32(l), LKey: b.q.mr.LKey()}
}

// Weigh records that the batch's i-th answer carries w values (a range,
// or a request for several): a failed one counts w in Reap's and
// Complete's counts. Unweighed answers count one each, until the set's
// first Weigh: a mode that weighs answers weighs every one.
func (b Batch) Weigh(i int, w uint32) {
	if b.q.weight == nil {
		b.q.weight = make([]uint32, b.s.cfg.Depth)
		for k := range b.q.weight {
			b.q.weight[k] = 1
		}
	}
	b.q.weight[(b.q.posted+uint64(i))%uint64(b.s.cfg.Depth)] = w
}

// Post posts the batch's chain: one doorbell.
func (b Batch) Post(wrs []verbs.SendWR) (int, error) {
	n, err := b.q.qp.PostSend(wrs)
	b.q.posted += uint64(n)
	return n, err
}

// PostMany posts the receive chains recvs (setting their Posted) and the
// batch's chain wrs with one provider call where the device can
// (verbs.PostMany). wrs may be empty: receives only (b may then be the
// zero Batch).
//
// A receive chain that fails does not hold the answers back: they are
// then posted on their own.
func (s *Set) PostMany(b Batch, recvs []verbs.RecvChain, wrs []verbs.SendWR) (int, error) {
	if len(wrs) == 0 {
		return verbs.PostMany(s.cfg.Device, recvs, nil, nil)
	}
	n, err := verbs.PostMany(s.cfg.Device, recvs, b.q.qp, wrs)
	if err != nil && n == 0 && recvFailed(recvs) {
		var serr error
		n, serr = b.q.qp.PostSend(wrs)
		err = errors.Join(err, serr)
	}
	b.q.posted += uint64(n)
	return n, err
}

// recvFailed reports whether a chain of recvs was not posted whole.
func recvFailed(recvs []verbs.RecvChain) bool {
	for i := range recvs {
		if recvs[i].Posted < len(recvs[i].WRs) {
			return true
		}
	}
	return false
}

// Reap polls the send CQ once and frees the slots signaled completions
// cover. It returns the number of send completions, of those with an
// error status (answers that did not leave) other than
// verbs.WCDeadlineErr, and of those that status (answers the provider
// dropped because their deadline passed before they could leave). From
// a shared CQ, the completions of other QPs are kept for Spilled.
// unsent is the values the failed ones carried (Batch.Weigh).
func (s *Set) Reap() (n, failed, late, unsent int) {
	got, err := s.cfg.CQ.Poll(s.wcs)
	if err != nil {
		return 0, 0, 0, 0
	}
	for i := range s.wcs[:got] {
		wc := &s.wcs[i]
		mine, bad, lost := s.Complete(wc)
		switch {
		case mine:
			n++
			unsent += lost
			switch {
			case !bad:
			case wc.Status == verbs.WCDeadlineErr:
				late++
			default:
				failed++
			}
		case s.cfg.Shared:
			s.spill = append(s.spill, *wc)
		}
	}
	return n, failed, late, unsent
}

// Complete takes a completion polled from the send CQ: if it is one of
// the set's QPs' (mine), it frees the slots it covers and reports
// whether it failed (an answer that did not leave), and then the values
// it carried (Batch.Weigh; one unweighed).
func (s *Set) Complete(wc *verbs.WC) (mine, failed bool, unsent int) {
	qi := int(wc.ID & 0xff)
	if qi >= len(s.qs) || s.qpns[qi] != wc.QPN {
		return false, false, 0
	}
	q := &s.qs[qi]
	seq := wc.ID >> 8
	if seq+1 > q.completed {
		q.completed = seq + 1
	}
	if wc.Status == verbs.WCSuccess {
		return true, false, 0
	}
	if q.weight == nil {
		return true, true, 1
	}
	return true, true, int(q.weight[seq%uint64(len(q.weight))])
}

// TakeFailed returns and forgets the counts of failed send completions
// that Next reaped while it waited for room, as Reap returns them:
// answers that did not leave, and of those not counted there, answers
// dropped for their deadline.
func (s *Set) TakeFailed() (failed, late, unsent int) {
	failed, late, unsent = s.failed, s.late, s.unsent
	s.failed, s.late, s.unsent = 0, 0, 0
	return failed, late, unsent
}

// TakeSpilled moves into dst (up to its length) the completions of other
// QPs that waiting for send queue room polled from a shared CQ, oldest
// first, and returns how many: the caller handles them before it polls
// again.
func (s *Set) TakeSpilled(dst []verbs.WC) int {
	n := copy(dst, s.spill)
	k := copy(s.spill, s.spill[n:])
	clear(s.spill[k:])
	s.spill = s.spill[:k]
	return n
}

// SignalEvery is how often a send work request is signaled.
func (s *Set) SignalEvery() int { return s.cfg.SignalEvery }

// Spilled is how many completions TakeSpilled has to give.
func (s *Set) Spilled() int { return len(s.spill) }

// ToErr moves every QP of the set to the error state: nothing more leaves.
func (s *Set) ToErr() {
	for _, q := range s.qs {
		q.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	}
}

// Close releases the QPs and their regions.
func (s *Set) Close() {
	for _, q := range s.qs {
		if q.qp != nil {
			q.qp.Close()
		}
		if q.mr != nil {
			q.mr.Close()
		}
	}
	s.qs = nil
}

// QPs returns the response QPs, for Connect to name them to clients
// (which accept answers only from these).
func (s *Set) QPs() []verbs.QP {
	qps := make([]verbs.QP, len(s.qs))
	for i := range s.qs {
		qps[i] = s.qs[i].qp
	}
	return qps
}
