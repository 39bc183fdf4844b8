package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// epochBackend numbers its sessions from 1 in every epoch, as the data
// paths do, and releases a session only of its current epoch.
type epochBackend struct {
	mu       sync.Mutex
	epoch    uint64
	next     uint64
	sessions map[uint64]bool
}

func newEpochBackend() *epochBackend {
	return &epochBackend{epoch: 1, next: 1, sessions: map[uint64]bool{}}
}

// newEpoch is a mode switch or restart: the sessions are gone, IDs restart.
func (b *epochBackend) newEpoch() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch++
	b.next = 1
	b.sessions = map[uint64]bool{}
}

func (b *epochBackend) live() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}

func (b *epochBackend) Connect(context.Context, *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.next
	b.next++
	b.sessions[id] = true
	return &adminpb.ConnectResponse{SessionId: id, Epoch: b.epoch}, nil
}

func (b *epochBackend) Disconnect(_ context.Context, req *adminpb.DisconnectRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := admin.CheckEpoch(req, b.epoch); err != nil {
		return err
	}
	if !b.sessions[req.GetSessionId()] {
		return fmt.Errorf("%w: %d", admin.ErrUnknownSession, req.GetSessionId())
	}
	delete(b.sessions, req.GetSessionId())
	return nil
}

func (b *epochBackend) Status(context.Context) (*adminpb.StatusResponse, error) {
	return &adminpb.StatusResponse{Epoch: b.epoch}, nil
}

// TestSessionTokensAcrossEpochs: after an epoch change the data path
// numbers sessions from 1 again, so B's new session has the ID A's old
// one had. A's Disconnect of its old session (by its token) must not
// touch B's; stale tokens are NotFound; the server keeps no record of the
// old epoch's sessions, and connect/disconnect churn leaves no records
// behind (issue 12, defect 1).
func TestSessionTokensAcrossEpochs(t *testing.T) {
	be := newEpochBackend()
	srv, addr := admintest.Start(t, admin.Config{}, be)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addr)
	connect := func() *adminpb.ConnectResponse {
		t.Helper()
		r, err := adm.Connect(ctx, admin.ValidConnect())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetSessionToken()) != adminclient.TokenLen {
			t.Fatalf("token of %d bytes", len(r.GetSessionToken()))
		}
		return r
	}
	a, b := connect(), connect()
	if a.GetSessionId() != 1 || bytes.Equal(a.GetSessionToken(), b.GetSessionToken()) {
		t.Fatalf("sessions %d %x, %d %x", a.GetSessionId(), a.GetSessionToken(), b.GetSessionId(), b.GetSessionToken())
	}
	be.newEpoch()
	b2 := connect() // B reconnects first: the new epoch's session 1
	if b2.GetSessionId() != a.GetSessionId() {
		t.Fatalf("the backend did not reuse ID %d (got %d): the test shows nothing", a.GetSessionId(), b2.GetSessionId())
	}
	for name, tok := range map[string][]byte{"A's old": a.GetSessionToken(), "B's old": b.GetSessionToken()} {
		if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: a.GetSessionId(), SessionToken: tok}); status.Code(err) != codes.NotFound {
			t.Errorf("Disconnect(%s token) = %v, want NotFound", name, err)
		}
	}
	if n := be.live(); n != 1 {
		t.Fatalf("%d sessions after the old tokens' disconnects, want B's new one", n)
	}
	if n := srv.Sessions(); n != 1 {
		t.Errorf("the admin server holds %d session records, want 1 (the old epoch's are gone)", n)
	}
	// Churn: records come and go with their sessions.
	for range 1000 {
		r := connect()
		if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: r.GetSessionToken()}); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := srv.Sessions(), be.live(); n != 1 || m != 1 {
		t.Errorf("after 1000 connect/disconnect cycles: %d records, %d sessions, want 1 and 1", n, m)
	}
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: b2.GetSessionToken()}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Sessions(); n != 0 {
		t.Errorf("%d records after the last disconnect", n)
	}
}
