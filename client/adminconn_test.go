package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// fakeAdmin is an admin server whose Status answers as a standby that
// knows no leader, and whose Connect refuses the first refuse calls with
// Unavailable and a retry-after of 20ms, then admits.
type fakeAdmin struct {
	adminpb.UnimplementedAdminServer
	lis      *countingListener
	addr     string
	refuse   int32
	connects atomic.Int32
	srv      *grpc.Server
}

func startFakeAdmin(t *testing.T, refuse int32) *fakeAdmin {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAdmin{lis: &countingListener{Listener: l}, addr: l.Addr().String(), refuse: refuse}
	f.srv = grpc.NewServer()
	adminpb.RegisterAdminServer(f.srv, f)
	go f.srv.Serve(f.lis)
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeAdmin) Status(context.Context, *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	return &adminpb.StatusResponse{Role: adminclient.RoleStandby}, nil
}

func (f *fakeAdmin) Connect(context.Context, *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if n := f.connects.Add(1); n <= f.refuse {
		st, _ := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
		return nil, st.Err()
	}
	return &adminpb.ConnectResponse{SessionId: 1}, nil
}

func testAdminConn(addrs ...string) *adminConn {
	a := &adminConn{log: slog.New(slog.DiscardHandler)}
	for _, x := range addrs {
		a.learn(x)
	}
	return a
}

// Rounds of connectAny against instances that answer but admit no one
// (standbys while a leader is elected) reuse one connection per
// instance: each round costs them no TLS handshake. Before, every round
// dialed again, and a thousand clients retrying through fresh handshakes
// were most of the instances' work in a failover storm.
func TestConnectAnyKeepsConnections(t *testing.T) {
	s1, s2 := startFakeAdmin(t, 0), startFakeAdmin(t, 0)
	a := testAdminConn(s1.addr, s2.addr)
	defer a.close()
	standby := func(ctx context.Context) error {
		st, err := a.adm.Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			return unavailable("status", err)
		}
		return unavailable("status", adminclient.RedirectError(st.GetLeader()))
	}
	const rounds = 4
	for range rounds {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := a.connectAny(ctx, 5*time.Second, false, probed(standby))
		cancel()
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("connectAny against standbys: %v, want ErrUnavailable", err)
		}
	}
	for i, s := range []*fakeAdmin{s1, s2} {
		if n := s.lis.accepted.Load(); n != 1 {
			t.Errorf("instance %d accepted %d connections over %d rounds, want 1", i+1, n, rounds)
		}
	}
}

// An instance that refuses a Connect with a retry-after (its admission
// control) is asked again after the pause until it admits the client;
// the other instances, which would only redirect to it, are not tried.
func TestConnectAnyWaitsOutRetryAfter(t *testing.T) {
	busyLeader, other := startFakeAdmin(t, 3), startFakeAdmin(t, 0)
	a := testAdminConn(busyLeader.addr, other.addr)
	defer a.close()
	connect := func(ctx context.Context) error {
		_, err := a.adm.Connect(ctx, &adminpb.ConnectRequest{})
		if err != nil {
			return unavailable("connect", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.connectAny(ctx, 5*time.Second, false, probed(connect)); err != nil {
		t.Fatalf("connectAny against an instance busy for 3 Connects: %v", err)
	}
	if n := busyLeader.connects.Load(); n != 4 {
		t.Errorf("the busy instance was asked %d times, want 4 (3 refusals, then admitted)", n)
	}
	if n := other.connects.Load(); n != 0 {
		t.Errorf("the other instance was asked %d times, want 0", n)
	}
	if a.endpoint() != busyLeader.addr {
		t.Errorf("admitted through %s, want %s", a.endpoint(), busyLeader.addr)
	}
}

func TestRetryPause(t *testing.T) {
	d := 100 * time.Millisecond
	if got := retryPause(d, 0); got != d {
		t.Errorf("retryPause(%v, 0) = %v, want %v", d, got, d)
	}
	if got := retryPause(d, 0.5); got != 125*time.Millisecond {
		t.Errorf("retryPause(%v, 0.5) = %v, want 125ms", d, got)
	}
	if got := retryPause(d, 0.9999); got >= 3*d/2 {
		t.Errorf("retryPause(%v, 0.9999) = %v, want below %v", d, got, 3*d/2)
	}
}

// Once admitted, the client holds a connection to every other known
// instance, opened in the background: a failover to one of them (the
// instance it used is gone) needs no new connection, so no TLS
// handshake in the storm of every client reconnecting at once.
func TestConnectAnyWarmsStandbys(t *testing.T) {
	leader, standby := startFakeAdmin(t, 0), startFakeAdmin(t, 0)
	a := testAdminConn(leader.addr, standby.addr)
	defer a.close()
	connect := func(ctx context.Context) error {
		_, err := a.adm.Connect(ctx, &adminpb.ConnectRequest{})
		if err != nil {
			return unavailable("connect", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.connectAny(ctx, 5*time.Second, false, probed(connect)); err != nil {
		t.Fatal(err)
	}
	if a.endpoint() != leader.addr {
		t.Fatalf("admitted through %s, want %s", a.endpoint(), leader.addr)
	}
	for standby.lis.accepted.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("no connection to the standby opened after the client was admitted")
		}
		time.Sleep(time.Millisecond)
	}
	leader.srv.Stop() // killed: the failover
	if err := a.connectAny(ctx, 5*time.Second, true, probed(connect)); err != nil {
		t.Fatalf("failover: %v", err)
	}
	if a.endpoint() != standby.addr {
		t.Fatalf("after the failover admitted through %s, want %s", a.endpoint(), standby.addr)
	}
	if n := standby.lis.accepted.Load(); n != 1 {
		t.Errorf("the standby accepted %d connections, want 1 (the one opened ahead of the failover)", n)
	}
}

// roleAdmin answers Status with the role and leader its function
// gives for the n-th call.
type roleAdmin struct {
	adminpb.UnimplementedAdminServer
	addr   string
	calls  atomic.Int32
	status func(n int32) *adminpb.StatusResponse
}

func startRoleAdmin(t *testing.T, status func(n int32) *adminpb.StatusResponse) *roleAdmin {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &roleAdmin{addr: l.Addr().String(), status: status}
	s := grpc.NewServer()
	adminpb.RegisterAdminServer(s, r)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return r
}

func (r *roleAdmin) Status(context.Context, *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	return r.status(r.calls.Add(1)), nil
}

// probed is a connectFunc that runs f within the probe's bound.
func probed(f func(context.Context) error) connectFunc {
	return func(ctx context.Context, probe time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, probe)
		defer cancel()
		return f(ctx)
	}
}

// statusConnect is a connect for connectAny that asks a's current
// instance its role, as Client.connect does first: a standby's answer is
// a redirect.
func statusConnect(a *adminConn) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := a.adm.Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			return unavailable("status", err)
		}
		if st.GetRole() == adminclient.RoleStandby {
			return unavailable("status", adminclient.RedirectError(st.GetLeader()))
		}
		return nil
	}
}

// During a failover an instance asked early in a round may be elected
// before the round ends: a later standby's redirect to it is followed,
// although it was asked already, instead of failing the round (and
// backing off while the new leader waits).
func TestConnectAnyFollowsRedirectToNewlyElected(t *testing.T) {
	var elected *roleAdmin
	elected = startRoleAdmin(t, func(n int32) *adminpb.StatusResponse {
		if n == 1 { // not elected yet
			return &adminpb.StatusResponse{Role: adminclient.RoleStandby}
		}
		return &adminpb.StatusResponse{Role: adminclient.RoleLeader, Leader: elected.addr}
	})
	standby := startRoleAdmin(t, func(int32) *adminpb.StatusResponse {
		return &adminpb.StatusResponse{Role: adminclient.RoleStandby, Leader: elected.addr}
	})
	a := testAdminConn(elected.addr, standby.addr)
	defer a.close()
	connect := statusConnect(a)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.connectAny(ctx, 5*time.Second, false, probed(connect)); err != nil {
		t.Fatalf("one round across the election: %v", err)
	}
	if a.endpoint() != elected.addr {
		t.Errorf("admitted through %s, want the newly elected %s", a.endpoint(), elected.addr)
	}
}

// A new leader whose first answer comes too late (its Connect held
// while the group elected it, then queued behind a storm of others) is
// asked again in the same round when a standby names it, instead of the
// round failing and the session waiting out a pause (the HA storm's
// sessions reconnected 0.5 to 0.8 s later so): base failed with "one
// round across a slow new leader: ... redirected to the leader at".
func TestConnectAnyFollowsRedirectToSlowLeader(t *testing.T) {
	var leader *roleAdmin
	leader = startRoleAdmin(t, func(n int32) *adminpb.StatusResponse {
		if n == 1 {
			time.Sleep(300 * time.Millisecond) // past the first try's 100 ms
		}
		return &adminpb.StatusResponse{Role: adminclient.RoleLeader, Leader: leader.addr}
	})
	standby := startRoleAdmin(t, func(int32) *adminpb.StatusResponse {
		return &adminpb.StatusResponse{Role: adminclient.RoleStandby, Leader: leader.addr}
	})
	a := testAdminConn(leader.addr, standby.addr)
	defer a.close()
	connect := statusConnect(a)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.connectAny(ctx, 100*time.Millisecond, false, probed(connect)); err != nil {
		t.Fatalf("one round across a slow new leader: %v", err)
	}
	if a.endpoint() != leader.addr || leader.calls.Load() != 2 {
		t.Errorf("admitted through %s after %d calls to the leader, want %s after 2", a.endpoint(), leader.calls.Load(), leader.addr)
	}
}

// A round asks the instances after the one that failed first, and those
// whose last dial failed (a killed leader) last.
func TestConnectAnyOrderPutsDownLast(t *testing.T) {
	a := testAdminConn("a", "b", "c", "d")
	for _, tc := range []struct {
		failed string
		down   []string
		want   []string
	}{
		{"a", nil, []string{"b", "c", "d", "a"}},
		{"c", nil, []string{"d", "a", "b", "c"}},
		{"a", []string{"a"}, []string{"b", "c", "d", "a"}},
		{"b", []string{"a"}, []string{"c", "d", "b", "a"}},
		{"b", []string{"c", "a"}, []string{"d", "b", "c", "a"}},
		{"", []string{"b"}, []string{"a", "c", "d", "b"}},
	} {
		a.down = nil
		for _, d := range tc.down {
			a.setDown(d, true)
		}
		if got := a.order(tc.failed); !slices.Equal(got, tc.want) {
			t.Errorf("order(failed %q, down %v) = %v, want %v", tc.failed, tc.down, got, tc.want)
		}
	}
	a.setDown("b", false)
	if a.down["b"] {
		t.Error("setDown(b, false) left b down")
	}
}

// A round in which an instance cannot be dialed (killed) tries it only
// briefly in the next round, last: it cost every client a whole try per
// round while grpc redialed it in the background.
func TestConnectAnyBoundsDownInstance(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // refused from now on
	standby := startFakeAdmin(t, 0)
	a := testAdminConn(dead, standby.addr)
	defer a.close()
	redirect := func(ctx context.Context) error {
		return unavailable("status", adminclient.RedirectError(""))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.connectAny(ctx, 300*time.Millisecond, false, probed(redirect)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connectAny: %v, want ErrUnavailable", err)
	}
	if !a.down[dead] || a.down[standby.addr] {
		t.Fatalf("down after a round: %v; want only %s", a.down, dead)
	}
	if got := a.order(""); got[len(got)-1] != dead {
		t.Fatalf("next round's order %v: the dead instance not last", got)
	}
}
