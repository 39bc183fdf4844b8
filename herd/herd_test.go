package herd

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var errBehind = errors.New("behind")

// fakeOracle counts up from 1<<40 and refuses every behindEvery-th claim.
type fakeOracle struct {
	mu          sync.Mutex
	next        uint64
	calls       int
	behindEvery int
	delay       atomic.Int64 // a claim that succeeds this late (ns)
}

func (o *fakeOracle) Claim(n int) (uint64, error) {
	if d := time.Duration(o.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.behindEvery > 0 && o.calls%o.behindEvery == 0 {
		return 0, errBehind
	}
	if o.next == 0 {
		o.next = 1 << 40
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func open(t testing.TB, opts string) verbs.Device {
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

func TestAdmitRelease(t *testing.T) {
	srv, err := New(Config{Device: open(t, ""), Oracle: &fakeOracle{}, MaxQPs: 1, MaxWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.Admit("x", nil, 4); !errors.Is(err, ErrArgument) {
		t.Fatalf("Admit(no QPs) = %v", err)
	}
	c1, c2 := clientQPs(1), clientQPs(2)
	g, err := srv.Admit("a", c1, 100)
	if err != nil || g.Window != 4 {
		t.Fatalf("Admit = %+v, %v", g, err)
	}
	if _, err := srv.Admit("b", c2, 4); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("Admit over capacity = %v", err)
	}
	if err := srv.Release(g.Session); err != nil {
		t.Fatal(err)
	}
	if err := srv.Release(g.Session); !errors.Is(err, ErrNoSession) {
		t.Fatalf("double Release = %v", err)
	}
	// The block comes back once the worker has swept past the release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err = srv.Admit("b", c2, 4); err == nil {
			break
		}
		if !errors.Is(err, ErrNoRoom) || time.Now().After(deadline) {
			t.Fatalf("Admit after Release = %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// clientQPs describes one client QP pair (not created: admission only
// records them) from the loopback address 127.0.0.i. The client's side of
// the mode and the tests that serve it are in package client.
func clientQPs(i byte) []ClientQP {
	a := verbs.Address{GID: verbs.GIDFromAddr(netip.AddrFrom4([4]byte{127, 0, 0, i})), Port: 4791}
	return []ClientQP{{Write: Endpoint{Addr: a, QPN: 0x100}, Recv: Endpoint{Addr: a, QPN: 0x101}}}
}
