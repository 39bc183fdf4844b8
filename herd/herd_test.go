package herd

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/claimtest"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

// The fake oracle and soft devices every mode's tests share.
type fakeOracle = claimtest.Oracle

var errBehind = claimtest.ErrBehind

func open(t testing.TB, opts string) verbs.Device { return claimtest.OpenSoft(t, opts) }

func TestAdmitRelease(t *testing.T) {
	srv, err := New(Config{Config: wk.Config{Device: open(t, ""), Oracle: &fakeOracle{}}, MaxQPs: 1, MaxWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	if _, err := srv.Admit(ctx, handshake.Admission{Name: "x", Window: 4}, handshake.SessionRef{}); !errors.Is(err, ErrArgument) {
		t.Fatalf("Admit(no QPs) = %v", err)
	}
	g, err := srv.Admit(ctx, admission("a", 1, 100), handshake.SessionRef{})
	if err != nil || g.Window != 4 {
		t.Fatalf("Admit = %+v, %v", g, err)
	}
	if _, err := srv.Admit(ctx, admission("b", 2, 4), handshake.SessionRef{}); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("Admit over capacity = %v", err)
	}
	if err := srv.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: g.Epoch}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: g.Epoch}); !errors.Is(err, ErrNoSession) {
		t.Fatalf("double Release = %v", err)
	}
	// The block comes back once the worker has swept past the release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err = srv.Admit(ctx, admission("b", 2, 4), handshake.SessionRef{}); err == nil {
			break
		}
		if !errors.Is(err, ErrNoRoom) || time.Now().After(deadline) {
			t.Fatalf("Admit after Release = %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// admission asks for window on one client QP pair (not created:
// admission only records them) from the loopback address 127.0.0.i: its
// UC write QP and its UD answer QP. The client's side of the mode and the
// tests that serve it are in package client.
func admission(name string, i byte, window int) handshake.Admission {
	a := verbs.Address{GID: verbs.GIDFromAddr(netip.AddrFrom4([4]byte{127, 0, 0, i})), Port: 4791}
	return handshake.Admission{Name: name, Window: window, ConnQPs: []handshake.Endpoint{{Addr: a, QPN: 0x100}},
		QPs: []handshake.Endpoint{{Addr: a, QPN: 0x101}}}
}
