package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Coalescing (issue 31 item 4): in a mode that serves ranges (fasst, and
// any mode whose facts say Ranges), concurrent calls of one Client are
// coalesced into ranged requests, as PD's client batches its Tso stream.
//
//   - A caller that finds fewer than depth ranged requests in flight goes
//     out at once: a lone GetTimestamp takes the ordinary path (driving
//     the engine itself, driveOwn), a lone Submit is a request of one
//     value. No timer: a lone caller waits for nothing but its answer.
//   - While depth requests are in flight, callers queue, in arrival order.
//     When one of them completes, the callers queued go out as one
//     request for k values (k = how many wait, at most MaxRange), and the
//     answer's values first, first+1, …, first+k-1 go to them in the
//     order they arrived. The wait is bounded by the round trip in
//     flight: a caller joins the next request, never a later one.
//
// Real-time order: a request's values are all claimed by the server after
// it received the request (PROTOCOL.md, FaSST "Real-time order"), hence
// after every caller of the batch began (a caller joins a batch only
// before the batch is sent), hence above every value returned before any
// of them began. The callers of one batch are concurrent with one
// another (each began before the request was sent and returns after its
// answer came), so any order among them is allowed; arrival order is
// kept. Each value goes to one caller: distinct offsets of one answer,
// and the engine accepts one answer per request (its regression check,
// accept, covers the range's first value and records its last).
//
// A failed batch: on ErrTimeout (the earliest deadline among its callers
// passed) the callers whose own deadline passed, or who gave up, fail;
// the others go back to the front of the queue and are sent again in the
// next batch (fresh values, claimed after the new request). On
// ErrUnsupported (the server switched to a mode without ranges) each
// caller is sent again as a request of its own. Any other error fails
// every caller of the batch with it. A caller is completed once, with a
// value or an error, never both.

// coalescer queues callers and turns them into batches (ranged requests)
// for the engine. Its state is under mu; send and finish are called
// without it (send enqueues into the engine, finish runs callers'
// callbacks, which may call Submit again).
type coalescer struct {
	mu       sync.Mutex
	depth    int // ranged requests in flight at most; 0: coalescing off
	maxK     int // values per request at most
	inflight int // batches (and lone GetTimestamp callers) in flight
	// head, tail: the callers waiting, linked by Request.next, in
	// arrival order. Invariant: the queue is empty unless inflight ==
	// depth (every release launches what waits).
	head, tail *Request
	free       []*batch
	// ranged: the mode the client is connected in serves ranges.
	ranged atomic.Bool

	env coalesceEnv
}

// coalesceEnv is what the coalescer needs of its Client: how to send a
// request to the engine (not coalesced), the engine's clock, the default
// timeout and the clock's origin, the request pool and the counters.
type coalesceEnv struct {
	send       func(*Request) error
	now        func() time.Duration
	defTimeout time.Duration
	start      time.Time
	pool       *sync.Pool
	st         *stats
}

// batch is one ranged request and the callers it serves, in value order.
type batch struct {
	q       *coalescer
	req     Request
	members []*Request
}

func (q *coalescer) init(depth int, env coalesceEnv) {
	q.depth, q.maxK, q.env = depth, MaxRange, env
}

// active reports whether calls are coalesced now.
func (q *coalescer) active() bool { return q.depth > 0 && q.ranged.Load() }

// prepare readies member r: no result yet, its own deadline on the
// engine clock (its Deadline, or the default timeout from now).
func (q *coalescer) prepare(r *Request) {
	now := q.env.now()
	r.TS, r.Err, r.born = 0, nil, now
	r.deadline = now + q.env.defTimeout
	if !r.Deadline.IsZero() {
		r.deadline = r.Deadline.Sub(q.env.start)
	}
}

// join is GetTimestamp's entry: alone reports that fewer than depth
// requests are in flight, so that the caller goes out at once by the
// ordinary path and calls release when it returns; otherwise r is
// queued for the next batch.
func (q *coalescer) join(r *Request) (alone bool) {
	q.prepare(r)
	q.mu.Lock()
	if q.inflight < q.depth {
		q.inflight++
		q.mu.Unlock()
		return true
	}
	q.push(r)
	q.mu.Unlock()
	return false
}

// submit is Submit's entry: r goes out at once as a request of one
// value when fewer than depth requests are in flight (an error then is
// Submit's), else it is queued for the next batch.
func (q *coalescer) submit(r *Request) error {
	q.prepare(r)
	q.mu.Lock()
	if q.inflight < q.depth {
		q.inflight++
		b := q.take()
		b.members = append(b.members, r)
		q.mu.Unlock()
		if err := q.launch(b); err != nil {
			q.uncount(b)
			q.put(b)
			q.release()
			return err
		}
		return nil
	}
	q.push(r)
	q.mu.Unlock()
	return nil
}

// push queues r at the back. Under mu.
func (q *coalescer) push(r *Request) {
	r.next = nil
	if q.tail == nil {
		q.head, q.tail = r, r
	} else {
		q.tail.next, q.tail = r, r
	}
}

// take returns an idle batch. Under mu. Batches are kept: at most depth
// exist, so a steady state allocates nothing.
func (q *coalescer) take() *batch {
	if n := len(q.free); n > 0 {
		b := q.free[n-1]
		q.free = q.free[:n-1]
		return b
	}
	b := &batch{q: q}
	b.req.Callback = b.done // one method value per batch, made once
	return b
}

// put returns b, its members handed out, to the idle batches.
func (q *coalescer) put(b *batch) {
	clear(b.members)
	b.members = b.members[:0]
	q.mu.Lock()
	q.free = append(q.free, b)
	q.mu.Unlock()
}

// release ends one request in flight and sends what waits.
func (q *coalescer) release() {
	q.mu.Lock()
	q.inflight--
	q.flush()
}

// flush sends the callers queued as batches while fewer than depth are
// in flight. Entered under mu; returns without it.
func (q *coalescer) flush() {
	for q.head != nil && q.inflight < q.depth {
		q.inflight++
		b := q.take()
		for r := q.head; r != nil && len(b.members) < q.maxK; r = q.head {
			q.head = r.next
			r.next = nil
			b.members = append(b.members, r) // grows to the largest batch once
		}
		if q.head == nil {
			q.tail = nil
		}
		q.mu.Unlock()
		if err := q.launch(b); err != nil {
			// The client closed: its callers fail (a caller's
			// Submit already returned).
			q.uncount(b)
			for _, m := range b.members {
				q.finish(m, 0, err, true)
			}
			q.put(b)
			q.mu.Lock()
			q.inflight--
			continue
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
}

// launch sends b as one request for its members' values: the earliest
// of their deadlines is its own. The callers count as requests from
// here (the engine counts the batch as one).
func (q *coalescer) launch(b *batch) error {
	r := &b.req
	r.n = len(b.members)
	dl := b.members[0].deadline
	fresh := 0
	for _, m := range b.members {
		dl = min(dl, m.deadline)
		if !m.counted {
			m.counted = true
			fresh++
		}
	}
	r.Deadline = q.env.start.Add(dl)
	add(&q.env.st.requests, fresh-1)
	return q.env.send(r)
}

// uncount takes back launch's count of b's callers when its request was
// not sent.
func (q *coalescer) uncount(b *batch) {
	add(&q.env.st.requests, 1-len(b.members))
	for _, m := range b.members {
		m.counted = false
	}
}

// done is a batch request's completion, on the goroutine driving the
// engine: the range is split among the callers, or its error handled
// (see the top of the file); then what waits is sent.
func (b *batch) done(r *Request) {
	q, st := b.q, b.q.env.st
	err := r.Err
	switch {
	case err == nil:
		for i, m := range b.members {
			q.finish(m, r.TS+Timestamp(i), nil, false)
		}
		add(&st.answers, len(b.members)-1)
		add(&st.completed, len(b.members)-1)
	case errors.Is(err, ErrUnsupported):
		// No ranges in this mode (any more): each caller on its own.
		// The engine counts each again, and counted the batch once.
		add(&st.requests, -len(b.members))
		add(&st.completed, -1)
		add(&st.failed, -1)
		for _, m := range b.members {
			m.counted = false
			if e := q.env.send(m); e != nil {
				q.finish(m, 0, e, true)
			}
		}
	default:
		now := q.env.now()
		retry := errors.Is(err, ErrTimeout)
		var head, tail *Request
		failed := 0
		for _, m := range b.members {
			if retry && !m.abandoned.Load() && now < m.deadline {
				if tail == nil {
					head = m
				} else {
					tail.next = m
				}
				tail = m
				continue
			}
			q.finish(m, 0, err, false)
			failed++
		}
		add(&st.completed, failed-1)
		add(&st.failed, failed-1)
		if retry {
			add(&st.timeouts, failed-1)
		}
		if head != nil {
			q.mu.Lock()
			tail.next = q.head
			q.head = head
			if q.tail == nil {
				q.tail = tail
			}
			q.mu.Unlock()
		}
	}
	q.put(b)
	q.release()
}

// finish completes member m, as the engine's finish does a request:
// recycled when its caller gave up, else its Callback or Done. count:
// add it to the completed (and failed) calls, for a caller completed
// outside a batch's answer.
func (q *coalescer) finish(m *Request, ts Timestamp, err error, count bool) {
	m.TS, m.Err, m.counted = ts, err, false
	if count {
		q.env.st.completed.Add(1)
		if err != nil {
			q.env.st.failed.Add(1)
		}
	}
	if m.abandoned.Load() {
		if m.pooled {
			m.abandoned.Store(false)
			q.env.pool.Put(m)
		}
		return
	}
	if m.Callback != nil {
		m.Callback(m)
		return
	}
	m.Done <- m
}

// add adds d, which may be negative, to c.
func add(c *atomic.Uint64, d int) {
	if d != 0 {
		c.Add(uint64(d)) // two's complement: a negative d subtracts
	}
}

// getCoalesced is GetTimestamp with coalescing on: a lone caller takes
// the ordinary path (getOne: driving the engine itself when it is idle),
// others wait for their share of the next batch.
func (c *Client) getCoalesced(ctx context.Context, r *Request) (Timestamp, error) {
	if c.co.join(r) {
		ts, err := c.getOne(ctx, r)
		c.co.release()
		return ts, err
	}
	return c.wait(ctx, r)
}
