package atomics

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var errBehind = errors.New("behind")

// fakeOracle counts up from 1<<40; while refuse is set, claims fail.
type fakeOracle struct {
	mu     sync.Mutex
	next   uint64
	refuse bool
}

func (o *fakeOracle) Claim(n int) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refuse {
		return 0, errBehind
	}
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func (o *fakeOracle) ClaimWait(ctx context.Context, n int) (uint64, error) { return o.Claim(n) }

func open(t testing.TB, opts string) verbs.Device {
	t.Helper()
	o, _ := verbs.ParseOptions(opts)
	d, err := verbs.Open("soft", "127.0.0.1:0", o)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
