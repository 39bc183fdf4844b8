// Package claimtest holds what the data-path modes' tests share: a fake
// oracle that hands out values and refuses claims on demand, and a soft
// device on loopback.
package claimtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft" // the provider Open names
)

// ErrBehind is what Oracle.Claim returns when it refuses a claim: pass it
// as the mode's Behind error so that the worker retries.
var ErrBehind = errors.New("claimtest: behind")

// First is the first value an Oracle hands out.
const First = 1 << 40

// Oracle counts up from First. Every BehindEvery-th claim, and every
// claim while refusing (SetRefuse), fails with ErrBehind; a claim that
// succeeds first sleeps Delay (ns). Set BehindEvery before use.
type Oracle struct {
	BehindEvery int
	Delay       atomic.Int64

	mu     sync.Mutex
	next   uint64
	calls  int
	refuse bool
}

// Claim reserves n values and returns the first.
func (o *Oracle) Claim(n int) (uint64, error) {
	if d := time.Duration(o.Delay.Load()); d > 0 {
		time.Sleep(d)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.refuse || (o.BehindEvery > 0 && o.calls%o.BehindEvery == 0) {
		return 0, ErrBehind
	}
	if o.next == 0 {
		o.next = First
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

// ClaimWait is Claim (the fake never waits for persistence).
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

// SetBehindEvery changes BehindEvery while claims may run.
func (o *Oracle) SetBehindEvery(n int) {
	o.mu.Lock()
	o.BehindEvery = n
	o.mu.Unlock()
}

// SetRefuse makes every claim fail (true) or succeed (false).
func (o *Oracle) SetRefuse(refuse bool) {
	o.mu.Lock()
	o.refuse = refuse
	o.mu.Unlock()
}

// Calls is how many claims were made.
func (o *Oracle) Calls() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls
}

// OpenSoft opens a soft device on 127.0.0.1 with provider options opts
// ("loss=0.05,seed=1"), closed when the test ends. The test is skipped
// when the provider cannot run here.
func OpenSoft(t testing.TB, opts string) verbs.Device {
	t.Helper()
	o, err := verbs.ParseOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open("soft", "127.0.0.1:0", o)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
