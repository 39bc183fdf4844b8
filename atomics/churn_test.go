package atomics

import (
	"context"
	"net/netip"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/verbs"
)

// TestChurnBoundsState admits and releases 3,000 clients from distinct
// addresses with room for only four client QPs at once: every release
// gives its QP back (a leak would refuse an Admit within four cycles),
// and no session is left (issue 12: bounded server state under churn,
// in every mode).
func TestChurnBoundsState(t *testing.T) {
	dev := open(t, "")
	o := &fakeOracle{}
	srv, err := New(context.Background(), Config{Device: dev, Oracle: o, MaxQPs: 4, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const cycles = 3000
	for i := range cycles {
		ip := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
		ep := handshake.Endpoint{Addr: verbs.Address{GID: verbs.GIDFromAddr(ip), Port: 4791}, QPN: 0x100}
		g, err := srv.Admit(context.Background(), handshake.Admission{Name: "churn", QPs: []handshake.Endpoint{ep, {Addr: ep.Addr, QPN: 0x101}}}, handshake.SessionRef{})
		if err != nil {
			t.Fatalf("cycle %d: Admit = %v", i, err)
		}
		if err := srv.Release(context.Background(), handshake.SessionRef{ID: g.Session}); err != nil {
			t.Fatalf("cycle %d: Release = %v", i, err)
		}
	}
	if n := srv.Stats().Sessions; n != 0 {
		t.Fatalf("%d sessions after %d admit/release cycles, want 0", n, cycles)
	}
	if st := srv.Lease(); st.Sessions != 0 {
		t.Fatalf("stats: %d sessions", st.Sessions)
	}
}
