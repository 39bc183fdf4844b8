package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/verbs"
)

// The counting provider wraps the soft one and counts the data-path
// calls a client makes into it (the crossings that are cgo calls on the
// ibv provider): polls, and posts of receives and sends, however
// combined.
func init() {
	verbs.Register("counting", func(device string, opts verbs.Options) (verbs.Device, error) {
		d, err := verbs.Open("soft", device, opts)
		if err != nil {
			return nil, err
		}
		return &countDev{Device: d}, nil
	})
}

type crossings struct{ polls, posts atomic.Int64 }

// lastCounting is the counting device last opened (one client per test).
var lastCounting struct {
	sync.Mutex
	d *countDev
}

type countDev struct {
	verbs.Device
	n crossings
}

type countPD struct {
	verbs.PD
	d *countDev
}

type countCQ struct {
	verbs.CQ
	d *countDev
}

type countQP struct {
	verbs.QP
	d *countDev
}

func (d *countDev) AllocPD() (verbs.PD, error) {
	lastCounting.Lock()
	lastCounting.d = d
	lastCounting.Unlock()
	pd, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return &countPD{PD: pd, d: d}, nil
}

func (d *countDev) CreateCQ(n int) (verbs.CQ, error) {
	cq, err := d.Device.CreateCQ(n)
	if err != nil {
		return nil, err
	}
	return &countCQ{CQ: cq, d: d}, nil
}

func (d *countDev) HoldDoorbell() {
	if b, ok := d.Device.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
	}
}

func (d *countDev) RingDoorbell() {
	if b, ok := d.Device.(verbs.DoorbellBatcher); ok {
		b.RingDoorbell()
	}
}

// PostMany is one crossing (ibv: one cgo call).
func (d *countDev) PostMany(recvs []verbs.RecvChain, sq verbs.QP, sends []verbs.SendWR) (int, error) {
	d.n.posts.Add(1)
	inner := make([]verbs.RecvChain, len(recvs))
	for i, r := range recvs {
		inner[i] = verbs.RecvChain{QP: unwrapQP(r.QP), WRs: r.WRs}
	}
	var isq verbs.QP
	if sq != nil {
		isq = unwrapQP(sq)
	}
	n, err := verbs.PostMany(d.Device, inner, isq, sends)
	for i := range recvs {
		recvs[i].Posted = inner[i].Posted
	}
	return n, err
}

func unwrapQP(q verbs.QP) verbs.QP {
	if c, ok := q.(*countQP); ok {
		return c.QP
	}
	return q
}

func unwrapCQ(c verbs.CQ) verbs.CQ {
	if x, ok := c.(*countCQ); ok {
		return x.CQ
	}
	return c
}

func (p *countPD) CreateQP(a verbs.QPInitAttr) (verbs.QP, error) {
	a.SendCQ, a.RecvCQ = unwrapCQ(a.SendCQ), unwrapCQ(a.RecvCQ)
	q, err := p.PD.CreateQP(a)
	if err != nil {
		return nil, err
	}
	return &countQP{QP: q, d: p.d}, nil
}

func (c *countCQ) Poll(wc []verbs.WC) (int, error) {
	c.d.n.polls.Add(1)
	return c.CQ.Poll(wc)
}

func (q *countQP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.d.n.posts.Add(1)
	return q.QP.PostSend(wrs)
}

func (q *countQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.d.n.posts.Add(1)
	return q.QP.PostRecv(wrs)
}

// TestSpecS0TwoCrossingsPerBatch: every step of the Spec-S0 client's
// engine crosses into the provider at most twice, one poll and one post
// of receives and sends together, serial and pipelined (issue 16, defect
// 8, the client side).
func TestSpecS0TwoCrossingsPerBatch(t *testing.T) {
	addrs := startServer(t, server.Config{})
	for _, tc := range []struct {
		name      string
		qps, w    int
		pipelined int
	}{{"serial", 1, 4, 1}, {"pipelined", 1, 64, 48}} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialT(t, addrs.Admin, WithDevice("counting", "127.0.0.1:0", ""), WithQPs(tc.qps), WithWindow(tc.w))
			lastCounting.Lock()
			d := lastCounting.d
			lastCounting.Unlock()
			var steps, worst atomic.Int64
			var lastPolls, lastPosts int64
			// afterStep runs on the goroutine driving the engine, under
			// c.drive: set it there.
			c.drive.Lock()
			c.eng.afterStep = func() {
				p, q := d.n.polls.Load(), d.n.posts.Load()
				dp, dq := p-lastPolls, q-lastPosts
				lastPolls, lastPosts = p, q
				steps.Add(1)
				if dp > 1 || dq > 1 {
					worst.Store(max(worst.Load(), dp+dq))
					t.Errorf("a step made %d polls and %d posts", dp, dq)
				}
			}
			lastPolls, lastPosts = d.n.polls.Load(), d.n.posts.Load()
			c.drive.Unlock()
			ctx := context.Background()
			done := make(chan *Request, tc.pipelined)
			reqs := make([]Request, tc.pipelined)
			const total = 3000
			issued, inflight := 0, 0
			for i := range reqs {
				reqs[i].Done = done
				if tc.pipelined == 1 {
					break
				}
				if err := c.Submit(&reqs[i]); err != nil {
					t.Fatal(err)
				}
				issued++
				inflight++
			}
			if tc.pipelined == 1 {
				for range total {
					if _, err := c.GetTimestamp(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			for inflight > 0 {
				r := <-done
				inflight--
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if issued < total {
					if err := c.Submit(r); err != nil {
						t.Fatal(err)
					}
					issued++
					inflight++
				}
			}
			c.drive.Lock()
			c.eng.afterStep = nil
			c.drive.Unlock()
			polls, posts := d.n.polls.Load(), d.n.posts.Load()
			t.Logf("%d steps, %d polls, %d posts in all (%.2f crossings per answer)", steps.Load(), polls, posts, float64(polls+posts)/total)
			if steps.Load() == 0 || posts == 0 {
				t.Fatal("no step counted: the test does not measure the engine")
			}
		})
	}
}
