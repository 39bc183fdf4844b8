package admin_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// gatedBackend is an epochBackend whose Connects wait for gate while it
// is not nil.
type gatedBackend struct {
	*epochBackend
	entered chan struct{}
	gate    chan struct{}
}

func (b *gatedBackend) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if b.gate != nil {
		b.entered <- struct{}{}
		<-b.gate
	}
	return b.epochBackend.Connect(ctx, req)
}

// TestConnectReplacesWithoutReplacer: a backend that cannot swap a
// session in one step (no admin.Replacer) still sees the named session
// released before the new one is admitted, only for the right token;
// two Connects naming the same session at once are not both let
// through (the second is refused, Unavailable, while the first runs).
func TestConnectReplacesWithoutReplacer(t *testing.T) {
	be := &gatedBackend{epochBackend: newEpochBackend()}
	srv, addr := admintest.Start(t, admin.Config{}, be)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addr)
	connect := func(replaces []byte) (*adminpb.ConnectResponse, error) {
		req := admin.ValidConnect()
		req.Replaces = replaces
		return adm.Connect(ctx, req)
	}
	a, err := connect(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := connect(nil)
	if err != nil {
		t.Fatal(err)
	}
	wrong := make([]byte, adminclient.TokenLen)
	copy(wrong, a.GetSessionToken())
	wrong[0] ^= 1
	if _, err := connect(wrong); err != nil {
		t.Fatal(err)
	}
	if n := be.live(); n != 3 {
		t.Fatalf("a Connect naming a wrong token: %d sessions, want 3 (none released)", n)
	}
	a2, err := connect(a.GetSessionToken())
	if err != nil {
		t.Fatal(err)
	}
	if n, m := be.live(), srv.Sessions(); n != 3 || m != 3 {
		t.Fatalf("after replacing a: %d sessions, %d records; want 3 and 3", n, m)
	}
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: a.GetSessionToken()}); status.Code(err) != codes.NotFound {
		t.Fatalf("Disconnect of the replaced session: %v, want NotFound", err)
	}

	// Two Connects naming b at once: the second is refused while the
	// first is in the backend, and b is released once.
	be.entered, be.gate = make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := connect(b.GetSessionToken())
		first <- err
	}()
	<-be.entered
	if _, err := connect(b.GetSessionToken()); status.Code(err) != codes.Unavailable {
		t.Fatalf("a second Connect naming the session being replaced: %v, want Unavailable", err)
	}
	close(be.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	be.gate = nil
	if n := be.live(); n != 3 {
		t.Fatalf("after replacing b: %d sessions, want 3", n)
	}
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: a2.GetSessionToken()}); err != nil {
		t.Fatal(err)
	}
}
