// Package respq is a worker's set of UD response queue pairs, shared by
// the modes that answer with SENDs (headeronly, herd): the answers of one
// batch are posted as one chain (one doorbell) on one QP, and successive
// batches rotate over the QPs (the thesis's multi-queue, §3.7). Sends are
// signaled selectively, every SignalEvery-th work request, and a signaled
// completion frees its slot and every slot before it, as on hardware. Each
// QP has a ring of payload slots in a registered region, one per send
// queue entry, for answers that carry bytes.
//
// A Set is owned by one worker goroutine and is not safe for concurrent
// use.
package respq

import (
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
}

type queue struct {
	qp        verbs.QP
	mr        verbs.MR
	posted    uint64
	completed uint64
}

// Set is the response QPs of one worker.
type Set struct {
	cfg  Config
	qs   []queue
	next int
	wcs  []verbs.WC
}

// New creates the QPs, brings them to RTS and registers their payload
// rings. On error it releases what it made.
func New(c Config) (s *Set, err error) {
	if c.QPs < 1 || c.Depth < 2 || c.SignalEvery < 1 || c.SignalEvery >= c.Depth || c.SlotLen < 0 || c.QPs > 255 {
		return nil, fmt.Errorf("respq: invalid config %+v", c)
	}
	s = &Set{cfg: c, wcs: make([]verbs.WC, max(c.Batch, 16))}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for r := range c.QPs {
		qp, err := c.PD.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: c.CQ, RecvCQ: c.CQ,
			Cap: verbs.QPCap{MaxSendWR: c.Depth, MaxRecvWR: 0, MaxSendSGE: 1, MaxRecvSGE: 0, MaxInlineData: c.SlotLen}})
		if err != nil {
			return nil, fmt.Errorf("respq: response QP %d: %w", r, err)
		}
		s.qs = append(s.qs, queue{qp: qp})
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
		if got, _ := s.Reap(); got == 0 {
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

// Prepare sets the work request ID and signaling of the i-th request of
// the batch, keeping the caller's other fields and flags.
func (b Batch) Prepare(wr *verbs.SendWR, i int) {
	seq := b.q.posted + uint64(i)
	k := uint64(b.s.cfg.SignalEvery)
	wr.ID = seq<<8 | uint64(b.qi)
	wr.Flags &^= verbs.Signaled
	if seq%k == k-1 {
		wr.Flags |= verbs.Signaled
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

// Post posts the batch's chain: one doorbell.
func (b Batch) Post(wrs []verbs.SendWR) (int, error) {
	n, err := b.q.qp.PostSend(wrs)
	b.q.posted += uint64(n)
	return n, err
}

// Reap polls the send CQ once and frees the slots signaled completions
// cover. It returns the number of completions, and of those with an
// error status (answers that did not leave).
func (s *Set) Reap() (n, failed int) {
	n, err := s.cfg.CQ.Poll(s.wcs)
	if err != nil {
		return 0, 0
	}
	for i := range s.wcs[:n] {
		wc := &s.wcs[i]
		qi := int(wc.ID & 0xff)
		if qi >= len(s.qs) {
			continue
		}
		if wc.Status != verbs.WCSuccess {
			failed++
		}
		if seq := wc.ID >> 8; seq+1 > s.qs[qi].completed {
			s.qs[qi].completed = seq + 1
		}
	}
	return n, failed
}

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
