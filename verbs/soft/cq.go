//go:build linux

package soft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/seqd/seqd/verbs"
)

// cq is a completion queue: a ring of WCs filled by whichever thread moves
// packets, and drained by Poll.
type cq struct {
	d       *device
	mu      sync.Mutex
	ring    []verbs.WC
	head, n int
	overrun atomic.Bool // set under mu
	// has is n > 0, set under mu: a poll of an empty CQ (a spinning
	// poller's, between every two answers) takes no lock.
	has atomic.Bool

	queues  atomic.Pointer[[]*queue] // queues of the QPs that use this CQ
	qMu     sync.Mutex
	notify  chan struct{}
	waiting atomic.Int32
	nqp     atomic.Int32
	closed  atomic.Bool
}

var _ verbs.CQ = (*cq)(nil)

func (d *device) CreateCQ(cqe int) (verbs.CQ, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	if cqe <= 0 || cqe > 1<<20 {
		return nil, fmt.Errorf("%w: CQ size %d", verbs.ErrInvalidArgument, cqe)
	}
	c := &cq{d: d, ring: make([]verbs.WC, cqe), notify: make(chan struct{}, 1)}
	c.queues.Store(&[]*queue{})
	d.nres.Add(1)
	return c, nil
}

// attach records that a QP on queue q reports to this CQ. When what
// arrives on q can complete work here (drive: the QP's receives, or the
// sends of an RC QP, which complete on ACKs), Poll drives q's socket. The
// send completions of UD and UC QPs are made when the WRs leave, so a CQ
// that only takes those is polled without a system call.
func (c *cq) attach(q *queue, drive bool) {
	c.qMu.Lock()
	defer c.qMu.Unlock()
	c.nqp.Add(1)
	if !drive {
		return
	}
	old := *c.queues.Load()
	for _, x := range old {
		if x == q {
			return
		}
	}
	qs := append(append([]*queue(nil), old...), q)
	c.queues.Store(&qs)
}

// push adds a completion. A full CQ is overrun: the completion is lost and
// Poll reports ErrCQOverrun, as a hardware CQ goes to error.
func (c *cq) push(wc *verbs.WC) {
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.overrun.Store(true)
		c.mu.Unlock()
		c.d.ctr.cqOverrun.Add(1)
		return
	}
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = *wc
	c.n++
	c.has.Store(true)
	c.mu.Unlock()
	if c.waiting.Load() != 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// pushN adds completions in one critical section (see queue.pendWC),
// copied in at most two runs round the ring.
func (c *cq) pushN(wcs []verbs.WC) {
	c.mu.Lock()
	if room := len(c.ring) - c.n; len(wcs) > room {
		c.overrun.Store(true)
		c.d.ctr.cqOverrun.Add(uint64(len(wcs) - room))
		wcs = wcs[:room]
	}
	for len(wcs) > 0 {
		j := c.head + c.n
		if j >= len(c.ring) {
			j -= len(c.ring)
		}
		k := copy(c.ring[j:], wcs)
		wcs = wcs[k:]
		c.n += k
	}
	c.has.Store(c.n > 0)
	c.mu.Unlock()
	if c.waiting.Load() != 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// take moves up to len(wc) completions out, in at most two runs.
func (c *cq) take(wc []verbs.WC) int {
	if !c.has.Load() {
		return 0
	}
	c.mu.Lock()
	k := 0
	for k < len(wc) && c.n > 0 {
		m := copy(wc[k:], c.ring[c.head:min(len(c.ring), c.head+c.n)])
		c.head += m
		if c.head == len(c.ring) {
			c.head = 0
		}
		c.n -= m
		k += m
	}
	if c.n == 0 {
		// An emptied ring starts again at its first entry: a CQ drained
		// batch by batch then reuses the same few cache lines.
		c.head = 0
		c.has.Store(false)
	}
	c.mu.Unlock()
	return k
}

// Poll implements verbs.CQ. On an empty CQ it drives the receive path of
// the CQ's queues once (without blocking) before giving up.
func (c *cq) Poll(wc []verbs.WC) (int, error) {
	if c.closed.Load() {
		return 0, verbs.ErrClosed
	}
	if len(wc) == 0 {
		return 0, nil
	}
	n := c.take(wc)
	if n == 0 {
		// The queues' completions for c may come straight into wc, the
		// oldest first; what they put in the ring (once wc filled up,
		// or when another queue's completions were there) is newer.
		for _, q := range *c.queues.Load() {
			n += q.pollInto(c, wc[n:])
		}
		if n < len(wc) {
			n += c.take(wc[n:])
		}
	}
	if n == 0 {
		if c.overrun.Load() {
			return 0, verbs.ErrCQOverrun
		}
	}
	return n, nil
}

// Wait implements verbs.CQ.
func (c *cq) Wait(ctx context.Context) error {
	if c.closed.Load() {
		return verbs.ErrClosed
	}
	c.waiting.Add(1)
	qs := *c.queues.Load()
	for _, q := range qs {
		q.waiters.Add(1)
		q.wake()
	}
	defer func() {
		for _, q := range qs {
			q.waiters.Add(-1)
		}
		c.waiting.Add(-1)
	}()
	for {
		c.mu.Lock()
		n := c.n
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *cq) Close() error {
	if c.nqp.Load() != 0 {
		return fmt.Errorf("%w: CQ still used by QPs", verbs.ErrBusy)
	}
	if c.closed.Swap(true) {
		return verbs.ErrClosed
	}
	c.d.nres.Add(-1)
	return nil
}
