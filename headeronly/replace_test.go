package headeronly

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestConnectReplaces: a Connect naming the caller's previous session by
// its token (ConnectRequest.replaces) takes that session's QPs and
// receive budget in one call, through the admin server; a wrong token
// releases nothing, and a refused Connect keeps the old session. A
// Connect admitted after its caller gave up on it (the caller never
// learnt its token) is replaced by the next Connect naming the same
// value.
func TestConnectReplaces(t *testing.T) {
	s := newServer(t, &fakeOracle{}) // 2 workers, MaxRecv 128, MaxWindow 64
	_, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler), SessionLease: time.Minute}, pb(s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addr)

	ep := func(port uint16, qpn uint32) *adminpb.Endpoint {
		a, _ := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: port}.MarshalBinary()
		return &adminpb.Endpoint{Address: a, Qpn: qpn}
	}
	// Two QPs of window 64: one per worker, 64 of each worker's 128.
	req := func(port uint16, replaces []byte) *adminpb.ConnectRequest {
		return &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{ep(port, 1), ep(port, 2)}, Window: 64,
			ProtocolVersion: spec.ProtocolVersion, Replaces: replaces}
	}
	held := func(tok []byte) bool {
		t.Helper()
		r, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{tok}})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.GetUnknownTokens()) == 0
	}
	sessions := func() uint64 {
		t.Helper()
		st, err := pb(s).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetSessions()
	}
	random := func() []byte {
		b := make([]byte, admin.TokenLen)
		rand.Read(b)
		return b
	}

	a, err := adm.Connect(ctx, req(1, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := adm.Connect(ctx, req(2, nil))
	if err != nil {
		t.Fatal(err)
	}
	// Both workers are full now (64 + 64 of 128).
	if _, err := adm.Connect(ctx, req(3, nil)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Connect on full workers: %v, want ResourceExhausted", err)
	}
	// The bug this fixes: the same QPs again, without naming the session.
	if _, err := adm.Connect(ctx, req(2, nil)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Connect of connected QPs: %v, want FailedPrecondition", err)
	}
	// A wrong token releases nothing: the QPs are still taken.
	if _, err := adm.Connect(ctx, req(2, random())); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Connect replacing a wrong token: %v, want FailedPrecondition", err)
	}
	if _, err := adm.Connect(ctx, req(2, []byte("short"))); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Connect with a 5-byte replaces: %v, want InvalidArgument", err)
	}
	// Another client's session named by a refused Connect stays too
	// (refused: it would need more receives than the workers have even
	// with b's freed).
	big := req(2, b.GetSessionToken())
	big.Qps = append(big.Qps, ep(2, 3), ep(2, 4), ep(2, 5))
	if _, err := adm.Connect(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("refused replacing Connect: %v, want ResourceExhausted", err)
	}
	if !held(a.GetSessionToken()) || !held(b.GetSessionToken()) || sessions() != 2 {
		t.Fatalf("after refused Connects: a held %v, b held %v, %d sessions; want both, 2", held(a.GetSessionToken()), held(b.GetSessionToken()), sessions())
	}

	// The right token: b's QPs and budget pass to the new session at once.
	b2, err := adm.Connect(ctx, req(2, b.GetSessionToken()))
	if err != nil {
		t.Fatalf("Connect replacing b: %v", err)
	}
	if b2.GetSessionId() == b.GetSessionId() || bytes.Equal(b2.GetSessionToken(), b.GetSessionToken()) {
		t.Fatal("the replacing Connect got the old session back")
	}
	if held(b.GetSessionToken()) || !held(b2.GetSessionToken()) || !held(a.GetSessionToken()) || sessions() != 2 {
		t.Fatalf("after replacing b: b held %v, b2 held %v, a held %v, %d sessions; want false, true, true, 2",
			held(b.GetSessionToken()), held(b2.GetSessionToken()), held(a.GetSessionToken()), sessions())
	}
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: b.GetSessionToken()}); status.Code(err) != codes.NotFound {
		t.Fatalf("Disconnect of the replaced session: %v, want NotFound", err)
	}

	// A Connect naming a value that names no session (the client's own
	// handle before its first grant) is admitted like any other...
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: a.GetSessionToken()}); err != nil {
		t.Fatal(err)
	}
	handle := random()
	if _, err := adm.Connect(ctx, req(1, handle)); err != nil {
		t.Fatalf("first Connect naming a handle: %v", err)
	}
	// ...and when its answer was lost, the next one naming the same
	// value replaces the session it created, whose token it never saw.
	c2, err := adm.Connect(ctx, req(1, handle))
	if err != nil {
		t.Fatalf("Connect replacing the unseen session: %v", err)
	}
	if sessions() != 2 || !held(c2.GetSessionToken()) || !held(b2.GetSessionToken()) {
		t.Fatalf("after replacing the unseen session: %d sessions, want 2 (c2 and b2)", sessions())
	}
	// The chain moves on: once c2 is replaced by its token, the handle
	// names nothing any more.
	if _, err := adm.Connect(ctx, req(1, c2.GetSessionToken())); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Connect(ctx, req(1, handle)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Connect naming a handle whose session was replaced since: %v, want FailedPrecondition", err)
	}
	if sessions() != 2 {
		t.Fatalf("%d sessions, want 2", sessions())
	}
}
