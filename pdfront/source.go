package pdfront

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqd/seqd/client"
)

// Source reserves count timestamps and returns the last of the
// consecutive range [last-count+1, last] it reserved for the caller
// alone. Calls may overlap.
type Source interface {
	Reserve(ctx context.Context, count int) (last uint64, err error)
}

// MaxCount bounds one reservation: one seqd range (client.MaxRange). PD's
// client merges at most 10000 callers into one TsoRequest
// (defaultMaxTSOBatchSize).
const MaxCount = client.MaxRange

// ErrCount is a TsoRequest's count outside 1..MaxCount.
var ErrCount = errors.New("pdfront: count out of range")

// ClientSource reserves each range through seqd's client library with one
// GetRange: count consecutive values reserved in one round trip, seqd's
// alone whoever else uses the group (native clients, other seqd-pd
// instances). It needs the group to run mode fasst; in the other modes a
// count above 1 fails (client.ErrUnsupported) and PD's client retries.
type ClientSource struct {
	c *client.Client
}

// NewClientSource reserves through c, which the caller closes.
func NewClientSource(c *client.Client) *ClientSource { return &ClientSource{c: c} }

// Reserve implements Source.
func (s *ClientSource) Reserve(ctx context.Context, count int) (uint64, error) {
	if count < 1 || count > MaxCount {
		return 0, fmt.Errorf("%w: %d", ErrCount, count)
	}
	r, err := s.c.GetRange(ctx, count)
	if err != nil {
		return 0, err
	}
	return uint64(r.Last()), nil
}
