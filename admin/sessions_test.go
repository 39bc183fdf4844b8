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
	// hold, when set, is called by Connect after it admitted a session
	// and before it answers (outside mu): a Connect answered late.
	hold func(id, epoch uint64)
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
	id := b.next
	b.next++
	b.sessions[id] = true
	epoch, hold := b.epoch, b.hold
	b.mu.Unlock()
	if hold != nil {
		hold(id, epoch)
	}
	return &adminpb.ConnectResponse{SessionId: id, Epoch: epoch}, nil
}

// setEpoch is newEpoch to the epoch e (epochs are start times: a clock
// stepped back makes a newer one smaller).
func (b *epochBackend) setEpoch(e uint64) {
	b.newEpoch()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch = e
}

func (b *epochBackend) Status(context.Context) (*adminpb.StatusResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &adminpb.StatusResponse{Epoch: b.epoch, Sessions: uint64(len(b.sessions))}, nil
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

// TestStaleEpochConnectKeepsNewer: a Connect answered in the old epoch
// but recorded after a Connect of the new epoch must not erase the new
// epoch's records (issue 26, item 6). It is refused (Unavailable), its
// session released, and the new-epoch client's KeepAlive still knows its
// token. The epochs are tried in both numeric orders: an epoch is a start
// time, and a clock stepped back makes the newer one smaller; the backend
// says which one it runs.
func TestStaleEpochConnectKeepsNewer(t *testing.T) {
	for _, c := range []struct {
		name       string
		old, newer uint64
	}{{"ascending", 100, 200}, {"clock stepped back", 200, 100}} {
		t.Run(c.name, func(t *testing.T) {
			be := newEpochBackend()
			be.setEpoch(c.old)
			srv, addr := admintest.Start(t, admin.Config{SessionLease: time.Minute}, be)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			adm := admintest.Client(ctx, t, addr)
			if _, err := adm.Connect(ctx, admin.ValidConnect()); err != nil { // the table is in the old epoch
				t.Fatal(err)
			}
			// Connect A is answered in the old epoch, but held before
			// the admin server records it.
			admitted, release := make(chan struct{}), make(chan struct{})
			be.mu.Lock()
			be.hold = func(uint64, uint64) {
				close(admitted)
				<-release
			}
			be.mu.Unlock()
			type result struct {
				r   *adminpb.ConnectResponse
				err error
			}
			aDone := make(chan result, 1)
			go func() {
				r, err := adm.Connect(ctx, admin.ValidConnect())
				aDone <- result{r, err}
			}()
			<-admitted
			be.mu.Lock()
			be.hold = nil
			be.mu.Unlock()
			// The data path restarts; B connects in the new epoch.
			be.setEpoch(c.newer)
			b, err := adm.Connect(ctx, admin.ValidConnect())
			if err != nil {
				t.Fatal(err)
			}
			if b.GetEpoch() != c.newer {
				t.Fatalf("B in epoch %d, want %d", b.GetEpoch(), c.newer)
			}
			close(release)
			a := <-aDone
			if a.err == nil {
				t.Errorf("A, answered in epoch %d after B's epoch %d was recorded: admitted (epoch %d), want refused", c.old, c.newer, a.r.GetEpoch())
			} else if status.Code(a.err) != codes.Unavailable {
				t.Errorf("A: %v, want Unavailable", a.err)
			}
			ka, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{b.GetSessionToken()}})
			if err != nil {
				t.Fatal(err)
			}
			if len(ka.GetUnknownTokens()) != 0 {
				t.Errorf("B's KeepAlive says its token is unknown: the stale Connect erased the new epoch's record")
			}
			if n := srv.Sessions(); n != 1 {
				t.Errorf("%d session records, want B's alone", n)
			}
			if got := srv.AdmissionRefusals()[admin.ReasonStaleEpoch]; got != 1 {
				t.Errorf("stale_epoch refusals %d, want 1", got)
			}
			if n := be.live(); n != 1 {
				t.Errorf("backend holds %d sessions, want B's alone", n)
			}
			// Disconnect of B's token still releases B's server session.
			if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: b.GetSessionToken()}); err != nil {
				t.Fatal(err)
			}
			if n := be.live(); n != 0 {
				t.Errorf("backend holds %d sessions after B's Disconnect", n)
			}
		})
	}
}
