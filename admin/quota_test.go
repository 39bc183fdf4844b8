package admin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// clientFrom dials addr from the loopback address local (another peer
// than 127.0.0.1), with a bearer token when token is not empty.
func clientFrom(ctx context.Context, t *testing.T, addr, local, token string) adminpb.AdminClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	opts := []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a)
	})}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(adminclient.BearerToken(token, true)))
	}
	cc, err := admin.Dial(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}

// wantRefused checks that err is a ResourceExhausted refusal naming flag.
func wantRefused(t *testing.T, what string, err error, flag string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), flag) {
		t.Errorf("%s: %v, want ResourceExhausted naming %s", what, err, flag)
	}
}

// TestPeerSessionQuota: a peer at its session quota is refused, with the
// quota and its flag named; another peer is admitted; replacing one of
// its own sessions, and connecting after a Disconnect, work at the quota
// (issue 26, item 4).
func TestPeerSessionQuota(t *testing.T) {
	be := admintest.NewBackend(nil)
	srv, addr := admintest.Start(t, admin.Config{Logger: quietLogger(), PeerQuota: admin.Quota{MaxSessions: 3}}, be)
	ctx := testCtx(t)
	flood := clientFrom(ctx, t, addr, "127.0.0.1", "")
	honest := clientFrom(ctx, t, addr, "127.0.0.2", "")
	var toks [][]byte
	for i := range 3 {
		r, err := flood.Connect(ctx, admin.ValidConnect())
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		toks = append(toks, r.GetSessionToken())
	}
	_, err := flood.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "4th session of a peer with quota 3", err, "-peer-max-sessions 3")
	if _, err := honest.Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatalf("another peer: %v", err)
	}
	req := admin.ValidConnect()
	req.Replaces = toks[0]
	r, err := flood.Connect(ctx, req)
	if err != nil {
		t.Fatalf("replacing its own session at the quota: %v", err)
	}
	toks[0] = r.GetSessionToken()
	if _, err := flood.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: toks[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := flood.Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatalf("connect after a Disconnect: %v", err)
	}
	_, err = flood.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "at the quota again", err, "-peer-max-sessions")
	if got := srv.AdmissionRefusals()[admin.ReasonPeerSessions]; got != 2 {
		t.Errorf("peer_sessions refusals %d, want 2", got)
	}
	if n := be.Sessions(); n != 4 {
		t.Errorf("backend holds %d sessions, want 3 + 1: refused Connects must not reach it", n)
	}
}

// TestConnectRateQuota: a peer's Connects beyond its bucket are refused
// until it refills; another peer has a bucket of its own.
func TestConnectRateQuota(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	be := admintest.NewBackend(nil)
	srv, addr := admintest.Start(t, admin.Config{Logger: quietLogger(), PeerQuota: admin.Quota{ConnectRate: 2, ConnectBurst: 3}}, be)
	admin.SetQuotaClock(srv, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	ctx := testCtx(t)
	flood := clientFrom(ctx, t, addr, "127.0.0.1", "")
	honest := clientFrom(ctx, t, addr, "127.0.0.2", "")
	// Connects the backend turns away as Unavailable (a standby's
	// redirects during a failover) cost no tokens.
	be.Fail(fmt.Errorf("%w: not the leader", admin.ErrUnavailable))
	for i := range 5 {
		if _, err := flood.Connect(ctx, admin.ValidConnect()); status.Code(err) != codes.Unavailable {
			t.Fatalf("connect %d to a failing backend: %v, want Unavailable", i, err)
		}
	}
	be.Fail(nil)
	for i := range 3 {
		if _, err := flood.Connect(ctx, admin.ValidConnect()); err != nil {
			t.Fatalf("connect %d of a burst of 3: %v", i, err)
		}
	}
	_, err := flood.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "4th Connect of a burst of 3", err, "-peer-connect-rate")
	if _, err := honest.Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatalf("another peer: %v", err)
	}
	mu.Lock()
	now = now.Add(500 * time.Millisecond) // one token at 2/s
	mu.Unlock()
	if _, err := flood.Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatalf("after the bucket refilled one: %v", err)
	}
	_, err = flood.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "and again", err, "-peer-connect-burst")
	if got := srv.AdmissionRefusals()[admin.ReasonPeerRate]; got != 2 {
		t.Errorf("peer_rate refusals %d, want 2", got)
	}
}

// TestIdentityQuota: an authenticated caller counts against its identity
// (its bearer token), not its peer: a flooder with a token is held to the
// identity quota, while an honest client on the same host with another
// token, and one without a token, are admitted.
func TestIdentityQuota(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("flood-token-0123456789\nhonest-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: file, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	be := admintest.NewBackend(nil)
	srv, addr := admintest.Start(t, admin.Config{Auth: auth, Logger: quietLogger(),
		PeerQuota: admin.Quota{MaxSessions: 2}, IdentityQuota: admin.Quota{MaxSessions: 3}}, be)
	ctx := testCtx(t)
	flood := clientFrom(ctx, t, addr, "127.0.0.1", "flood-token-0123456789")
	for i := range 3 {
		if _, err := flood.Connect(ctx, admin.ValidConnect()); err != nil {
			t.Fatalf("connect %d with a token (identity quota 3): %v", i, err)
		}
	}
	_, err = flood.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "4th session of an identity with quota 3", err, "-identity-max-sessions 3")
	if _, err := clientFrom(ctx, t, addr, "127.0.0.1", "honest-token-0123456789").Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatalf("another token on the flooder's host: %v", err)
	}
	anon := clientFrom(ctx, t, addr, "127.0.0.1", "")
	for i := range 2 {
		if _, err := anon.Connect(ctx, admin.ValidConnect()); err != nil {
			t.Fatalf("connect %d without a token on the flooder's host: %v", i, err)
		}
	}
	_, err = anon.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "3rd session of a peer with quota 2", err, "-peer-max-sessions 2")
	r := srv.AdmissionRefusals()
	if r[admin.ReasonIdentitySessions] != 1 || r[admin.ReasonPeerSessions] != 1 {
		t.Errorf("refusals %v, want one identity_sessions and one peer_sessions", r)
	}
}
