package headeronly

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestChurnBoundsState connects and disconnects 3,000 clients from
// distinct addresses: afterwards no session, no peer-table entry and no
// receive budget is left, and the address handles return to zero once
// their grace period is over (issue 12: bounded server state under
// churn, in every mode).
func TestChurnBoundsState(t *testing.T) {
	s := newServer(t, &fakeOracle{})
	ctx := context.Background()
	const cycles = 3000
	for i := range cycles {
		ip := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
		a, _ := verbs.Address{GID: verbs.GIDFromAddr(ip), Port: 4791}.MarshalBinary()
		resp, err := pb(s).Connect(ctx, &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{{Address: a, Qpn: 0x100}, {Address: a, Qpn: 0x101}},
			Window: 4, ProtocolVersion: spec.ProtocolVersion})
		if err != nil {
			t.Fatalf("cycle %d: Connect = %v", i, err)
		}
		if err := pb(s).Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: resp.GetSessionId(), Epoch: resp.GetEpoch()}); err != nil {
			t.Fatalf("cycle %d: Disconnect = %v", i, err)
		}
	}
	st, err := pb(s).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSessions() != 0 {
		t.Fatalf("%d sessions after %d cycles, want 0", st.GetSessions(), cycles)
	}
	s.mu.Lock()
	for _, w := range s.Workers {
		if n := len(*w.peers.Load()); n != 0 || w.budget != 0 {
			t.Errorf("worker %d: %d peers, receive budget %d after the churn, want 0 and 0", w.ID, n, w.budget)
		}
	}
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for s.AddressHandles() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d address handles 10s after %d cycles, want 0", s.AddressHandles(), cycles)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
