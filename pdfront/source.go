package pdfront

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// time. Its requests are reused from one reservation to the next, so a
// reservation allocates nothing once the largest count was seen.
type ClientSource struct {
	c *client.Client

	mu   sync.Mutex
	reqs []client.Request
	done chan *client.Request
}

// NewClientSource reserves through c, which the caller closes.
func NewClientSource(c *client.Client) *ClientSource { return &ClientSource{c: c} }

// Reserve implements Source.
func (s *ClientSource) Reserve(ctx context.Context, count int) (uint64, error) {
	if count < 1 || count > MaxCount {
		return 0, fmt.Errorf("%w: %d", ErrCount, count)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
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
			return 0, err
		}
	}
	for range reqs {
		select {
		case <-s.done:
		case <-ctx.Done():
			s.abandon(count)
			return 0, ctx.Err()
		}
	}
	var last uint64
	for i := range reqs {
		if err := reqs[i].Err; err != nil {
			return 0, err
		}
		last = max(last, uint64(reqs[i].TS))
	}
	return last, nil
}

// abandon forgets the buffers after a reservation that stopped early:
// the engine may still complete its submitted requests into them.
func (s *ClientSource) abandon(submitted int) {
	if submitted > 0 {
		s.reqs, s.done = nil, nil
	}
}
