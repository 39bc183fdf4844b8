package verbstest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/seqd/seqd/verbs"
)

// Counting wraps a device so that a test can count a data path's calls
// into the provider: every CQ.Poll, QP.PostSend, QP.PostRecv and
// PostMany of the CQs and QPs made through it is one crossing (on the ibv
// provider each is one cgo call). The wrapper itself implements
// verbs.ManyPoster, as one crossing, whatever the device underneath does.
// Empty polls (those that found nothing) are counted apart, so that a
// test can tell a busy-polling loop's idle spins from its batches.
func Counting(dev verbs.Device) *CountingDevice { return &CountingDevice{Device: dev} }

// CountingDevice is a device wrapped by Counting.
type CountingDevice struct {
	verbs.Device
	// Polls and EmptyPolls count CQ.Poll calls (EmptyPolls those that
	// returned nothing); Posts counts PostSend, PostRecv and PostMany.
	Polls, EmptyPolls, Posts atomic.Uint64

	mu    sync.Mutex
	inner []verbs.RecvChain // PostMany's, under mu
}

var _ verbs.ManyPoster = (*CountingDevice)(nil)

// Crossings are the calls into the provider counted so far, empty polls
// excepted.
func (d *CountingDevice) Crossings() uint64 {
	return d.Polls.Load() - d.EmptyPolls.Load() + d.Posts.Load()
}

// AllocPD implements verbs.Device.
func (d *CountingDevice) AllocPD() (verbs.PD, error) {
	p, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return &countingPD{PD: p, d: d}, nil
}

// CreateCQ implements verbs.Device.
func (d *CountingDevice) CreateCQ(cqe int) (verbs.CQ, error) {
	c, err := d.Device.CreateCQ(cqe)
	if err != nil {
		return nil, err
	}
	return &countingCQ{CQ: c, d: d}, nil
}

// PostMany implements verbs.ManyPoster: one crossing.
func (d *CountingDevice) PostMany(recvs []verbs.RecvChain, sq verbs.QP, sends []verbs.SendWR) (int, error) {
	d.Posts.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inner = d.inner[:0]
	for _, r := range recvs {
		d.inner = append(d.inner, verbs.RecvChain{QP: unwrapQP(r.QP), WRs: r.WRs})
	}
	n, err := verbs.PostMany(d.Device, d.inner, unwrapQP(sq), sends)
	for i := range recvs {
		recvs[i].Posted = d.inner[i].Posted
	}
	return n, err
}

type countingPD struct {
	verbs.PD
	d *CountingDevice
}

func (p *countingPD) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	attr.SendCQ, attr.RecvCQ = unwrapCQ(attr.SendCQ), unwrapCQ(attr.RecvCQ)
	q, err := p.PD.CreateQP(attr)
	if err != nil {
		return nil, err
	}
	return &countingQP{QP: q, d: p.d}, nil
}

type countingCQ struct {
	verbs.CQ
	d *CountingDevice
}

func (c *countingCQ) Poll(wc []verbs.WC) (int, error) {
	c.d.Polls.Add(1)
	n, err := c.CQ.Poll(wc)
	if n == 0 {
		c.d.EmptyPolls.Add(1)
	}
	return n, err
}

func (c *countingCQ) Wait(ctx context.Context) error { return c.CQ.Wait(ctx) }

type countingQP struct {
	verbs.QP
	d *CountingDevice
}

func (q *countingQP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.d.Posts.Add(1)
	return q.QP.PostSend(wrs)
}

func (q *countingQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.d.Posts.Add(1)
	return q.QP.PostRecv(wrs)
}

// VisitCounters passes the QP's counters through, where it has them.
func (q *countingQP) VisitCounters(f func(string, uint64)) {
	if c, ok := q.QP.(verbs.Counters); ok {
		c.VisitCounters(f)
	}
}

func unwrapCQ(c verbs.CQ) verbs.CQ {
	if x, ok := c.(*countingCQ); ok {
		return x.CQ
	}
	return c
}

func unwrapQP(q verbs.QP) verbs.QP {
	if x, ok := q.(*countingQP); ok {
		return x.QP
	}
	return q
}
