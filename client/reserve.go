package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seqd/seqd/spec"
)

// Range is k consecutive timestamps reserved for one caller: First,
// First+1, …, Last().
//
// A Range has every guarantee a timestamp from GetTimestamp has: its
// values are unique across all callers of the seqd group, every one is
// greater than any value handed out (to anyone) before the call began,
// and it is the answer to this call.
//
// In the hybrid format the values of a range share one millisecond: Last
// has First's physical part, and value i's logical part is First's plus
// i, below 2^18. That is what PD's TSO answers too, so a range can be
// handed to PD clients as (physical, logical of the last value, count)
// (cmd/seqd-pd does).
type Range struct {
	First Timestamp
	Count int
}

// Last is the range's last value.
func (r Range) Last() Timestamp { return r.First + Timestamp(r.Count-1) }

// At is the range's value i (0 ≤ i < Count).
func (r Range) At(i int) Timestamp { return r.First + Timestamp(i) }

// MaxRange is the most values one GetRange reserves.
const MaxRange = spec.FaSSTMaxRange

// GetRange reserves k consecutive timestamps (1 ≤ k ≤ MaxRange) in one
// round trip: one request answered with the first of k values claimed
// together, never k values pieced together.
//
// Only modes whose request can ask for k values serve it: fasst, erpc. In the
// other modes (Spec-S0 and herd answer one value per request in the
// immediate; atomics adds one per FETCH_AND_ADD; darpc and rfp do not
// offer it yet) it fails with an error matching ErrUnsupported; k = 1
// works in every mode. A call waiting when the server switches to such a
// mode fails the same way.
func (c *Client) GetRange(ctx context.Context, k int) (Range, error) {
	if k < 1 || k > MaxRange {
		return Range{}, fmt.Errorf("%w: GetRange of %d values, want 1..%d", ErrConfig, k, MaxRange)
	}
	r := rangeRequests.Get().(*Request)
	r.Deadline, r.n = c.deadline(ctx), k
	if err := c.Submit(r); err != nil {
		rangeRequests.Put(r)
		return Range{}, err
	}
	select {
	case <-r.Done:
		ts, err := r.TS, r.Err
		rangeRequests.Put(r)
		if err != nil {
			return Range{}, err
		}
		return Range{First: ts, Count: k}, nil
	case <-ctx.Done():
		// The engine completes it later into its Done; it is not put back.
		r.abandoned.Store(true)
		return Range{}, ctxError(ctx.Err())
	}
}

// rangeRequests recycles GetRange's requests (not Request.pooled: an
// abandoned one is left to the collector, since the engine recycles
// only c.pool's).
var rangeRequests = sync.Pool{New: func() any { return &Request{Done: make(chan *Request, 1)} }}

// rangeTransport is the capability of a transport whose one request can
// ask for k consecutive values (spec.FaSSTMaxRange at most), answered
// in one round trip with the first of them.
type rangeTransport interface {
	// SendRange sends request id for k consecutive values; the result's
	// Value is the first. It reports false, sending nothing, when the
	// transport has no room now.
	SendRange(now time.Duration, id, k int) (bool, error)
}

// span is how far r's last value lies above its first: k-1 for a range
// of k, 0 for a timestamp.
func (r *Request) span() uint64 { return uint64(max(r.n, 1) - 1) }

// sendRange sends the range request at the head of the backlog, or
// fails it when the transport cannot serve ranges. It reports whether it
// took the request off the backlog. A range the transport took but could
// not post is in flight all the same: it is sent again at its timeout.
func (e *engine) sendRange(now time.Duration) bool {
	r := e.backlog
	rt, ok := e.tr.(rangeTransport)
	if !ok {
		e.popFront()
		e.finish(r, 0, fmt.Errorf("%w: GetRange of %d values in mode %s", ErrUnsupported, r.n, e.mode))
		return true
	}
	if len(e.free) == 0 {
		return false
	}
	id := e.free[len(e.free)-1]
	if sent, _ := rt.SendRange(now, id, r.n); !sent {
		return false
	}
	e.reqs[id] = e.popFront()
	e.free = e.free[:len(e.free)-1]
	return true
}
