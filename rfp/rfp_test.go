package rfp

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/verbs"
)

func newServer(t *testing.T, maxClients int) *Server {
	t.Helper()
	s, err := New(Config{Config: wk.Config{Device: claimtest.OpenSoft(t, ""), Oracle: &claimtest.Oracle{}, Epoch: 7}, MaxQPs: maxClients, MaxWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func endpoint(i int, qpn verbs.QPN) handshake.Endpoint {
	ip := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
	return handshake.Endpoint{Addr: verbs.Address{GID: verbs.GIDFromAddr(ip), Port: 4791}, QPN: qpn}
}

// held is the number of sessions the server still holds resources of.
func (s *Server) held() (live, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reclaim()
	return len(s.sessions), len(s.limbo)
}

// TestAdmitRules: capacity, replaces, epochs, and a stopped mode.
func TestAdmitRules(t *testing.T) {
	s := newServer(t, 2)
	ctx := context.Background()
	a := handshake.Admission{Name: "a", QPs: []handshake.Endpoint{endpoint(1, 0x100), endpoint(1, 0x101)}}
	g1, err := s.Admit(ctx, a, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if g1.Window != 4 {
		t.Fatalf("window %d, want the maximum 4 (asked for the default)", g1.Window)
	}
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{endpoint(2, 0x100)}}, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrNoCapacity) {
		t.Fatalf("third QP on one worker with room for two: %v", err)
	}
	if _, err := s.Admit(ctx, handshake.Admission{}, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrInvalidArgument) {
		t.Fatalf("no QPs: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g1.Session, Epoch: g1.Epoch + 1}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("release of another epoch: %v", err)
	}
	// Naming it in another epoch releases nothing, and a refused Admit
	// keeps it.
	if _, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{endpoint(3, 0x100)}},
		handshake.SessionRef{ID: g1.Session, Epoch: g1.Epoch + 1}); !errors.Is(err, dataplane.ErrNoCapacity) {
		t.Fatalf("replace of another epoch while full: %v", err)
	}
	if s.Sessions() != 1 {
		t.Fatal("a refused Admit released the session it names")
	}
	// Replacing it takes its capacity (a reconnect to a full server).
	g2, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{endpoint(3, 0x100), endpoint(3, 0x101)}},
		handshake.SessionRef{ID: g1.Session, Epoch: g1.Epoch})
	if err != nil {
		t.Fatalf("replace while full: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g1.Session, Epoch: g1.Epoch}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("the replaced session is still there: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g2.Session, Epoch: g2.Epoch}); err != nil {
		t.Fatal(err)
	}
	g3, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{endpoint(4, 0x100)}}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	g4, err := s.Admit(ctx, handshake.Admission{QPs: []handshake.Endpoint{endpoint(4, 0x101)}}, handshake.SessionRef{ID: g3.Session, Epoch: g3.Epoch})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g3.Session, Epoch: g3.Epoch}); !errors.Is(err, dataplane.ErrUnknownSession) {
		t.Fatalf("the replaced session is still there: %v", err)
	}
	if high, err := s.Stop(); high != 0 || err != nil {
		t.Fatal(high, err)
	}
	if _, err := s.Admit(ctx, a, handshake.SessionRef{}); !errors.Is(err, dataplane.ErrUnavailable) {
		t.Fatalf("Admit after Stop: %v", err)
	}
	if err := s.Release(ctx, handshake.SessionRef{ID: g4.Session, Epoch: g4.Epoch}); err != nil {
		t.Fatal(err)
	}
}
