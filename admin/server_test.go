package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// testTimeout bounds every test's RPCs; none should come near it.
const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// start runs a server over a fresh fake backend and returns a connected
// client.
func start(t *testing.T, cfg admin.Config) (*admin.Server, *admintest.Backend, *grpc.ClientConn) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	b := admintest.NewBackend(nil)
	srv, addr := admintest.Start(t, cfg, b)
	cc, err := adminclient.Dial(testCtx(t), addr)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, b, cc
}

func TestConnectValidation(t *testing.T) {
	_, b, cc := start(t, admin.Config{})
	c := adminpb.NewAdminClient(cc)
	ctx := testCtx(t)
	for _, tc := range admin.ConnectCases() {
		t.Run(tc.Name, func(t *testing.T) {
			before := len(b.Connects())
			resp, err := c.Connect(ctx, tc.Req)
			reached := len(b.Connects()) - before
			if tc.Valid {
				if err != nil {
					t.Fatalf("Connect: %v, want OK", err)
				}
				if resp.GetSessionId() == 0 || len(resp.GetAssignment()) != len(tc.Req.GetQps()) {
					t.Fatalf("Connect response %v", resp)
				}
				if reached != 1 {
					t.Fatalf("backend saw %d requests, want 1", reached)
				}
				return
			}
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("Connect: %v, want InvalidArgument", err)
			}
			if reached != 0 {
				t.Fatalf("invalid request reached the backend")
			}
		})
	}
}

// TestDisconnect: Disconnect names its session by token, never by a bare
// ID; an unknown token (or one already used) is NotFound.
func TestDisconnect(t *testing.T) {
	_, b, cc := start(t, admin.Config{})
	c := adminpb.NewAdminClient(cc)
	ctx := testCtx(t)

	_, err := c.Disconnect(ctx, &adminpb.DisconnectRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Disconnect(unset): %v, want InvalidArgument", err)
	}
	resp, err := c.Connect(ctx, admin.ValidConnect())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetSessionToken()); n != adminclient.TokenLen {
		t.Fatalf("session token of %d bytes, want %d", n, adminclient.TokenLen)
	}
	if n := b.Sessions(); n != 1 {
		t.Fatalf("sessions after connect = %d", n)
	}
	_, err = c.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: resp.GetSessionId()})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Disconnect(bare ID): %v, want InvalidArgument", err)
	}
	forged := append([]byte(nil), resp.GetSessionToken()...)
	forged[0] ^= 1
	_, err = c.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: resp.GetSessionId(), SessionToken: forged})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Disconnect(wrong token): %v, want NotFound", err)
	}
	if n := b.Sessions(); n != 1 {
		t.Fatalf("sessions after refused disconnects = %d, want 1", n)
	}
	if _, err := c.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: resp.GetSessionToken()}); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	if n := b.Sessions(); n != 0 {
		t.Fatalf("sessions after disconnect = %d", n)
	}
	_, err = c.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: resp.GetSessionToken()})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Disconnect(used token): %v, want NotFound", err)
	}
}

func TestErrorMapping(t *testing.T) {
	_, b, cc := start(t, admin.Config{})
	c := adminpb.NewAdminClient(cc)
	ctx := testCtx(t)
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("%w: recovering persisted mark", admin.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("%w: no request QP free", admin.ErrNoCapacity), codes.ResourceExhausted},
		{fmt.Errorf("%w: 42", admin.ErrUnknownSession), codes.NotFound},
		{fmt.Errorf("%w: running herd", admin.ErrFailedPrecondition), codes.FailedPrecondition},
		{fmt.Errorf("%w: gid not routable", admin.ErrInvalidArgument), codes.InvalidArgument},
		{status.Error(codes.PermissionDenied, "not on the allow list"), codes.PermissionDenied},
		{errors.New("something broke"), codes.Internal},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			sess, err := c.Connect(ctx, admin.ValidConnect())
			if err != nil {
				t.Fatal(err)
			}
			b.Fail(tc.err)
			defer b.Fail(nil)
			_, err = c.Status(ctx, &adminpb.StatusRequest{})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("Status: %v, want %v", err, tc.want)
			}
			_, err = c.Connect(ctx, admin.ValidConnect())
			if got := status.Code(err); got != tc.want {
				t.Fatalf("Connect: %v, want %v", err, tc.want)
			}
			_, err = c.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: sess.GetSessionToken()})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("Disconnect: %v, want %v", err, tc.want)
			}
			if msg := status.Convert(err).Message(); tc.want != codes.PermissionDenied && msg != tc.err.Error() {
				t.Fatalf("message %q, want %q", msg, tc.err.Error())
			}
		})
	}
}

func TestOversizedMessageRefused(t *testing.T) {
	_, b, cc := start(t, admin.Config{})
	c := adminpb.NewAdminClient(cc)
	req := admin.ValidConnect()
	req.ClientName = strings.Repeat("x", admin.DefaultMaxRecvMsgSize+1)
	_, err := c.Connect(testCtx(t), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Connect(oversized): %v, want ResourceExhausted", err)
	}
	if len(b.Connects()) != 0 {
		t.Fatal("oversized request reached the backend")
	}
	// The connection survives, and a normal request still works.
	if _, err := c.Status(testCtx(t), &adminpb.StatusRequest{}); err != nil {
		t.Fatalf("Status after oversized request: %v", err)
	}
}

func TestHealth(t *testing.T) {
	srv, _, cc := start(t, admin.Config{})
	h := healthpb.NewHealthClient(cc)
	ctx := testCtx(t)

	check := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		if resp.GetStatus() != want {
			t.Fatalf("Check(%q) = %v, want %v", service, resp.GetStatus(), want)
		}
	}
	check("", healthpb.HealthCheckResponse_SERVING)
	check(adminclient.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(unknown service): %v, want NotFound", err)
	}

	watch, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		if resp.GetStatus() != want {
			t.Fatalf("Watch = %v, want %v", resp.GetStatus(), want)
		}
	}
	next(healthpb.HealthCheckResponse_SERVING)
	srv.SetServing(false)
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	check("", healthpb.HealthCheckResponse_NOT_SERVING)
	check(adminclient.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	srv.SetServing(true)
	next(healthpb.HealthCheckResponse_SERVING)
	check("", healthpb.HealthCheckResponse_SERVING)
}

func TestReflection(t *testing.T) {
	_, _, cc := start(t, admin.Config{})
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{adminclient.ServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !got[want] {
			t.Errorf("reflection lists %v, missing %s", got, want)
		}
	}
	// The Admin service's descriptor resolves, as grpcurl needs.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: adminclient.ServiceName},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("no descriptor for %s: %v", adminclient.ServiceName, resp)
	}
	stream.CloseSend()
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := admintest.NewBackend(nil)
	m, err := admin.NewMetrics(reg, admin.BackendSessions(b, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NewMetrics(reg, nil); err == nil {
		t.Fatal("registering the metrics twice succeeded")
	}
	_, addr := admintest.Start(t, admin.Config{Metrics: m, Logger: quietLogger()}, b)
	ctx := testCtx(t)
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := adminpb.NewAdminClient(cc)
	if _, err := c.Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Status(ctx, &adminpb.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Connect(ctx, &adminpb.ConnectRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatal(err)
	}

	hs, err := admin.ServeMetrics("127.0.0.1:0", reg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Shutdown(ctx)

	body := get(t, ctx, "http://"+hs.Addr+"/metrics")
	for _, want := range []string{
		`seqd_admin_requests_total{code="OK",method="Connect"} 1`,
		`seqd_admin_requests_total{code="InvalidArgument",method="Connect"} 1`,
		`seqd_admin_requests_total{code="OK",method="Status"} 2`,
		`seqd_admin_requests_total{code="NotFound",method="Disconnect"} 0`,
		"seqd_admin_sessions 1",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "grpc.health") {
		t.Error("/metrics counts non-Admin methods")
	}
	if got := get(t, ctx, "http://"+hs.Addr+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

func get(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func TestServeMetricsBadAddr(t *testing.T) {
	if _, err := admin.ServeMetrics("127.0.0.1:notaport", prometheus.NewRegistry(), quietLogger()); err == nil {
		t.Fatal("ServeMetrics on a bad address succeeded")
	}
	if _, err := admin.ServeMetrics("127.0.0.1:0", nil, nil); err == nil {
		t.Fatal("ServeMetrics with a nil registry succeeded")
	}
}

func TestDial(t *testing.T) {
	ctx := testCtx(t)
	// Off loopback, Dial insists that the caller choose credentials. No
	// connection is attempted.
	if _, err := adminclient.Dial(ctx, "seqd-admin.invalid:7070"); !errors.Is(err, adminclient.ErrPlaintextRefused) {
		t.Fatalf("Dial(non-loopback) without creds: %v, want ErrPlaintextRefused", err)
	}
	// Nobody listening: Dial fails fast with ErrUnavailable.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	if _, err := adminclient.Dial(ctx, addr); !errors.Is(err, admin.ErrUnavailable) {
		t.Fatalf("Dial(closed port): %v, want ErrUnavailable", err)
	}
	// A done context ends the wait.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := adminclient.Dial(done, addr); !errors.Is(err, context.Canceled) && !errors.Is(err, admin.ErrUnavailable) {
		t.Fatalf("Dial(cancelled ctx): %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := admin.New(admin.Config{MaxWindow: -1}, admintest.NewBackend(nil)); err == nil {
		t.Fatal("New accepted a negative MaxWindow")
	}
	if _, err := admin.New(admin.Config{}, nil); err == nil {
		t.Fatal("New accepted a nil backend")
	}
}

func TestCustomLimits(t *testing.T) {
	_, _, cc := start(t, admin.Config{MaxQPsPerClient: 1, MaxWindow: 8, Modes: []string{"only"}})
	c := adminpb.NewAdminClient(cc)
	ctx := testCtx(t)
	req := admin.ValidConnect() // two QPs, window DefaultMaxWindow, spec-s0
	if _, err := c.Connect(ctx, req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Connect over custom limits: %v", err)
	}
	req.Qps = req.Qps[:1]
	req.Window = 8
	req.Mode = "only"
	if _, err := c.Connect(ctx, req); err != nil {
		t.Fatalf("Connect within custom limits: %v", err)
	}
}

func TestServeAndShutdown(t *testing.T) {
	srv, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Logger: quietLogger()}, admintest.NewBackend(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Addr(); got != "127.0.0.1:0" {
		t.Fatalf("Addr before Serve = %q", got)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	ctx := testCtx(t)
	cc, err := adminclient.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if got := srv.Addr(); got != lis.Addr().String() {
		t.Fatalf("Addr = %q, want %q", got, lis.Addr())
	}
	// An open health Watch keeps a graceful stop waiting; Shutdown with a
	// done context stops hard instead.
	watch, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch = %v, %v", r, err)
	}
	stopCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := srv.Shutdown(stopCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v, want nil after Shutdown", err)
	}
}
