package herd

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/verbs"
)

// TestChurnBoundsState admits and releases clients from 3,000 distinct
// addresses: afterwards no session is left, and the address handles
// return to zero once their grace period is over (issue 12, defect 4:
// herd kept one handle per address ever seen until Close).
func TestChurnBoundsState(t *testing.T) {
	srv, err := New(Config{Config: wk.Config{Device: open(t, ""), Oracle: &fakeOracle{}}, MaxQPs: 8, MaxWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const cycles = 3000
	peak := 0
	for i := range cycles {
		ip := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
		a := verbs.Address{GID: verbs.GIDFromAddr(ip), Port: 4791}
		adm := handshake.Admission{Name: "churn", Window: 4, ConnQPs: []handshake.Endpoint{{Addr: a, QPN: 0x100}},
			QPs: []handshake.Endpoint{{Addr: a, QPN: 0x101}}}
		var g handshake.Grant
		deadline := time.Now().Add(5 * time.Second)
		for {
			if g, err = srv.Admit(context.Background(), adm, handshake.SessionRef{}); err == nil {
				break
			}
			if !errors.Is(err, ErrNoRoom) || time.Now().After(deadline) {
				t.Fatalf("cycle %d: Admit = %v", i, err)
			}
			time.Sleep(100 * time.Microsecond) // the worker frees released blocks after its next sweep
		}
		if err := srv.Release(context.Background(), handshake.SessionRef{ID: g.Session}); err != nil {
			t.Fatalf("cycle %d: Release = %v", i, err)
		}
		peak = max(peak, srv.AddressHandles())
	}
	if n := srv.sessionCount(); n != 0 {
		t.Fatalf("%d sessions after %d admit/release cycles, want 0", n, cycles)
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.AddressHandles() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d address handles %v after %d admit/release cycles from distinct addresses, want 0", srv.AddressHandles(), 10*time.Second, cycles)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d cycles: peak %d address handles (those released within the grace period), 0 after it", cycles, peak)
}
