package pdfront

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/client"
)

// Source reserves count timestamps and returns the last of the
// consecutive range [last-count+1, last] it stands for (see the package
// documentation for when such a range belongs to the caller alone).
// Calls may overlap; an implementation serializes what it must.
type Source interface {
	Reserve(ctx context.Context, count int) (last uint64, err error)
}

// MaxCount bounds one reservation: PD's client merges at most 10000
// callers into one TsoRequest (defaultMaxTSOBatchSize).
const MaxCount = 1 << 16

// ErrCount is a TsoRequest's count outside 1..MaxCount.
var ErrCount = errors.New("pdfront: count out of range")

// ClientSource reserves ranges through seqd's client library: one
// posted chain of count requests per reservation, one reservation at a
// time. A chain from one client is usually served by one batch of one
// worker, so its values come back consecutive. Its requests are reused from one reservation to the next, so a
// reservation allocates nothing once the largest count was seen.
type ClientSource struct {
	c *client.Client

	// Exact, when set, answers only ranges whose values all came back to
	// this front end (consecutive): such a range is seqd's alone however
	// many other clients the group has. A batch that is not consecutive
	// is dropped (its values are never answered) and taken again, up to
	// ExactAttempts times in all; then Reserve fails with ErrNotExact.
	Exact         bool
	ExactAttempts int

	// exact counts reservations whose values came back consecutive (the
	// range is then seqd's alone whoever else uses the group); spanning
	// the others, whose range also holds values this front end did not
	// receive (its own lost answers, or, if the rules are broken, other
	// clients' values).
	exact, spanning atomic.Uint64

	mu   sync.Mutex
	reqs []client.Request
	done chan *client.Request
}

// NewClientSource reserves through c, which the caller closes.
// Exact is off.
func NewClientSource(c *client.Client) *ClientSource {
	return &ClientSource{c: c, ExactAttempts: 8}
}

// ErrNotExact is a reservation in Exact mode whose batches never came
// back consecutive.
var ErrNotExact = errors.New("pdfront: no consecutive batch from seqd")

// Reserve implements Source.
func (s *ClientSource) Reserve(ctx context.Context, count int) (uint64, error) {
	if count < 1 || count > MaxCount {
		return 0, fmt.Errorf("%w: %d", ErrCount, count)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range max(s.ExactAttempts, 1) {
		last, exact, err := s.batch(ctx, count)
		if err != nil || exact || !s.Exact {
			return last, err
		}
	}
	return 0, fmt.Errorf("%w: %d attempts for %d values", ErrNotExact, max(s.ExactAttempts, 1), count)
}

// batch takes count values in one posted chain and returns the largest
// and whether they were consecutive.
func (s *ClientSource) batch(ctx context.Context, count int) (last uint64, exact bool, err error) {
	if cap(s.reqs) < count {
		s.reqs = make([]client.Request, count)
		s.done = make(chan *client.Request, count)
	}
	reqs := s.reqs[:count]
	var dl time.Time
	if d, ok := ctx.Deadline(); ok {
		dl = d
	}
	for i := range reqs {
		reqs[i] = client.Request{Deadline: dl, Done: s.done}
		if err := s.c.Submit(&reqs[i]); err != nil {
			s.abandon(i)
			return 0, false, err
		}
	}
	for range reqs {
		select {
		case <-s.done:
		case <-ctx.Done():
			s.abandon(count)
			return 0, false, ctx.Err()
		}
	}
	first := ^uint64(0)
	for i := range reqs {
		if err := reqs[i].Err; err != nil {
			return 0, false, err
		}
		last, first = max(last, uint64(reqs[i].TS)), min(first, uint64(reqs[i].TS))
	}
	if exact = last-first == uint64(count-1); exact {
		s.exact.Add(1)
	} else {
		s.spanning.Add(1)
	}
	return last, exact, nil
}

// Ranges returns how many reservations came back as consecutive values
// (exact) and how many did not (spanning).
func (s *ClientSource) Ranges() (exact, spanning uint64) { return s.exact.Load(), s.spanning.Load() }

// abandon forgets the buffers after a reservation that stopped early:
// the engine may still complete its submitted requests into them.
func (s *ClientSource) abandon(submitted int) {
	if submitted > 0 {
		s.reqs, s.done = nil, nil
	}
}
