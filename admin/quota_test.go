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
	cc, err := adminclient.Dial(ctx, addr, opts...)
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

// connectWindow connects on adm with two QPs (ValidConnect) at window
// and returns the window granted, failing the test on an error.
func connectWindow(ctx context.Context, t *testing.T, adm adminpb.AdminClient, window uint32, replaces []byte) *adminpb.ConnectResponse {
	t.Helper()
	req := admin.ValidConnect()
	req.Window, req.Replaces = window, replaces
	r, err := adm.Connect(ctx, req)
	if err != nil {
		t.Fatalf("connect at window %d: %v", window, err)
	}
	return r
}

// TestPeerRecvQuota: a peer's sessions together hold at most its receive
// quota (QPs × window): a Connect beyond it gets a smaller window, and is
// refused, naming the quota and its flag, only when not one receive a QP
// fits; another peer is admitted at its full window; the receives come
// back at Disconnect and when a session is replaced (issue 26, item 4).
func TestPeerRecvQuota(t *testing.T) {
	be := admintest.NewBackend(nil)
	srv, addr := admintest.Start(t, admin.Config{Logger: quietLogger(), PeerQuota: admin.Quota{MaxRecv: 1000}}, be)
	ctx := testCtx(t)
	flood := clientFrom(ctx, t, addr, "127.0.0.1", "")
	honest := clientFrom(ctx, t, addr, "127.0.0.2", "")
	a := connectWindow(ctx, t, flood, 256, nil) // 512 receives
	b := connectWindow(ctx, t, flood, 256, nil)
	if w := b.GetWindow(); w != 244 {
		t.Fatalf("second session granted window %d, want 244: 2 QPs in the 488 receives left of 1000", w)
	}
	req := admin.ValidConnect()
	req.Window = 1
	_, err := flood.Connect(ctx, req)
	wantRefused(t, "a peer holding its 1000 receives", err, "-peer-max-recv 1000")
	if r := srv.AdmissionRefusals()[admin.ReasonPeerRecv]; r != 1 {
		t.Errorf("peer_recv refusals %d, want 1", r)
	}
	if n := be.Sessions(); n != 2 {
		t.Errorf("backend holds %d sessions, want 2: a refused Connect must not reach it", n)
	}
	if w := connectWindow(ctx, t, honest, 256, nil).GetWindow(); w != 256 {
		t.Errorf("another peer granted window %d, want 256", w)
	}
	// Replacing a session frees its receives for the new one.
	a = connectWindow(ctx, t, flood, 256, a.GetSessionToken())
	if w := a.GetWindow(); w != 256 {
		t.Errorf("replacing a session of 512 receives at the quota: window %d, want 256", w)
	}
	if _, err := flood.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: b.GetSessionToken()}); err != nil {
		t.Fatal(err)
	}
	if w := connectWindow(ctx, t, flood, 256, nil).GetWindow(); w != 244 {
		t.Errorf("after a Disconnect of 488 receives: window %d, want 244", w)
	}
	_, err = flood.Connect(ctx, req)
	wantRefused(t, "at the quota again", err, "-peer-max-recv")
}

// TestRecvQuotaLease: the receives of a session whose lease ran out
// count no more.
func TestRecvQuotaLease(t *testing.T) {
	be := admintest.NewBackend(nil)
	_, addr := admintest.Start(t, admin.Config{Logger: quietLogger(), SessionLease: 300 * time.Millisecond,
		PeerQuota: admin.Quota{MaxRecv: 512}}, be)
	ctx := testCtx(t)
	adm := clientFrom(ctx, t, addr, "127.0.0.1", "")
	connectWindow(ctx, t, adm, 256, nil)
	_, err := adm.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "a peer holding its 512 receives", err, "-peer-max-recv 512")
	deadline := time.Now().Add(10 * time.Second)
	for be.Sessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("session not reclaimed at its lease: %d sessions", be.Sessions())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if w := connectWindow(ctx, t, adm, 256, nil).GetWindow(); w != 256 {
		t.Errorf("after the lease ran out: window %d, want 256", w)
	}
}

// TestIdentityRecvQuota: an authenticated caller's receives count
// against its identity: held to -identity-max-recv, while a caller
// without a token on the same host has its peer's quota.
func TestIdentityRecvQuota(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("flood-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: file, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	be := admintest.NewBackend(nil)
	srv, addr := admintest.Start(t, admin.Config{Auth: auth, Logger: quietLogger(),
		PeerQuota: admin.Quota{MaxRecv: 4096}, IdentityQuota: admin.Quota{MaxRecv: 300}}, be)
	ctx := testCtx(t)
	flood := clientFrom(ctx, t, addr, "127.0.0.1", "flood-token-0123456789")
	if w := connectWindow(ctx, t, flood, 256, nil).GetWindow(); w != 150 {
		t.Fatalf("identity with 300 receives granted window %d for 2 QPs, want 150", w)
	}
	_, err = flood.Connect(ctx, admin.ValidConnect())
	wantRefused(t, "an identity holding its 300 receives", err, "-identity-max-recv 300")
	if w := connectWindow(ctx, t, clientFrom(ctx, t, addr, "127.0.0.1", ""), 256, nil).GetWindow(); w != 256 {
		t.Errorf("a caller without a token on the flooder's host: window %d, want 256", w)
	}
	if r := srv.AdmissionRefusals(); r[admin.ReasonIdentityRecv] != 1 || r[admin.ReasonPeerRecv] != 0 {
		t.Errorf("refusals %v, want one identity_recv", r)
	}
}
