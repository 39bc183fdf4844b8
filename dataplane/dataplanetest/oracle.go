package dataplanetest

import (
	"context"
	"errors"
	"sync"
)

// ErrBehind is the error Oracle never returns but modes are handed as
// dataplane.Config.Behind.
var ErrBehind = errors.New("dataplanetest: behind")

// Oracle is the suite's claimer: it counts up from 1<<40 and can be
// floored, as package modes floors the oracle at a mode switch.
type Oracle struct {
	mu   sync.Mutex
	next uint64
}

// Claim reserves n values and returns the first.
func (o *Oracle) Claim(n int) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

// ClaimWait is Claim (atomics' Leaser).
func (o *Oracle) ClaimWait(ctx context.Context, n int) (uint64, error) { return o.Claim(n) }

// Current is the last value handed out (0 before the first).
func (o *Oracle) Current() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.next == 0 {
		return 0
	}
	return o.next - 1
}

// Floor makes every later value larger than v.
func (o *Oracle) Floor(v uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next = max(o.next, v+1)
}
