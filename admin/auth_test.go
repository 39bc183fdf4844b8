package admin_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/internal/testpki"
)

// recorder is an Admin service that counts the calls that reach it, so a
// test can show that a refused call changed nothing.
type recorder struct {
	adminpb.UnimplementedAdminServer
	setModes, connects, keepAlives, disconnects atomic.Int64
}

func (r *recorder) KeepAlive(context.Context, *adminpb.KeepAliveRequest) (*adminpb.KeepAliveResponse, error) {
	r.keepAlives.Add(1)
	return &adminpb.KeepAliveResponse{}, nil
}

func (r *recorder) Disconnect(context.Context, *adminpb.DisconnectRequest) (*adminpb.DisconnectResponse, error) {
	r.disconnects.Add(1)
	return &adminpb.DisconnectResponse{}, nil
}

func (r *recorder) SetMode(context.Context, *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	r.setModes.Add(1)
	return &adminpb.SetModeResponse{Mode: "herd"}, nil
}

func (r *recorder) Connect(context.Context, *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	r.connects.Add(1)
	return &adminpb.ConnectResponse{SessionId: 1}, nil
}

func (r *recorder) Status(context.Context, *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	return &adminpb.StatusResponse{Mode: "spec-s0"}, nil
}

func authServe(t *testing.T, creds credentials.TransportCredentials, a *admin.Authorizer) (*recorder, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.Unary)}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	r := &recorder{}
	adminpb.RegisterAdminServer(s, r)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return r, lis.Addr().String()
}

func authDial(t *testing.T, addr string, opts ...grpc.DialOption) adminpb.AdminClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}

func authWriteFile(t *testing.T, name, data string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodToken = "s3cret-token-0123456789"

func TestAuthToken(t *testing.T) {
	tf := authWriteFile(t, "tokens", "# operators\n\n"+goodToken+"\n", 0o600)
	a, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: tf})
	if err != nil {
		t.Fatal(err)
	}
	r, addr := authServe(t, nil, a)
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []grpc.DialOption{grpc.WithPerRPCCredentials(adminclient.BearerToken("not-the-token-at-all", true))}, codes.Unauthenticated},
		{"token", []grpc.DialOption{grpc.WithPerRPCCredentials(adminclient.BearerToken(goodToken, true))}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.setModes.Load()
			c := authDial(t, addr, append([]grpc.DialOption{plain}, tc.opts...)...)
			_, err := c.SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("SetMode: %v (%v), want %v", got, err, tc.want)
			}
			reached := r.setModes.Load() - before
			if (tc.want == codes.OK) != (reached == 1) {
				t.Fatalf("SetMode reached the service %d times with code %v", reached, tc.want)
			}
			// Status and Connect stay open without ProtectConnect.
			if _, err := c.Status(ctx, &adminpb.StatusRequest{}); err != nil {
				t.Fatalf("Status: %v", err)
			}
			if _, err := c.Connect(ctx, &adminpb.ConnectRequest{}); err != nil {
				t.Fatalf("Connect: %v", err)
			}
		})
	}
}

func TestAuthProtectConnect(t *testing.T) {
	tf := authWriteFile(t, "tokens", goodToken+"\n", 0o600)
	a, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: tf, ProtectConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	r, addr := authServe(t, nil, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := authDial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if _, err := c.Connect(ctx, &adminpb.ConnectRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Connect without a token = %v, want Unauthenticated", err)
	}
	if r.connects.Load() != 0 {
		t.Fatal("a refused Connect reached the backend")
	}
	c = authDial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(adminclient.BearerToken(goodToken, true)))
	if _, err := c.Connect(ctx, &adminpb.ConnectRequest{}); err != nil {
		t.Fatalf("Connect with a token: %v", err)
	}
}

// TestAuthProtectAdmission: with ProtectConnect, Connect, KeepAlive and
// Disconnect are authorised by one rule: each is refused without
// credentials (and reaches nothing), and each is allowed with them
// (issue 12, defect 3: KeepAlive needed none, so anyone could keep any
// session alive forever).
func TestAuthProtectAdmission(t *testing.T) {
	tf := authWriteFile(t, "tokens", goodToken+"\n", 0o600)
	a, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: tf, ProtectConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	r, addr := authServe(t, nil, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	anon := authDial(t, addr, plain)
	wrong := authDial(t, addr, plain, grpc.WithPerRPCCredentials(adminclient.BearerToken("not-the-token-at-all", true)))
	good := authDial(t, addr, plain, grpc.WithPerRPCCredentials(adminclient.BearerToken(goodToken, true)))
	calls := []struct {
		name    string
		call    func(adminpb.AdminClient) error
		reached *atomic.Int64
	}{
		{"Connect", func(c adminpb.AdminClient) error { _, err := c.Connect(ctx, &adminpb.ConnectRequest{}); return err }, &r.connects},
		{"KeepAlive", func(c adminpb.AdminClient) error {
			_, err := c.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionIds: []uint64{1}, Epoch: 1})
			return err
		}, &r.keepAlives},
		{"Disconnect", func(c adminpb.AdminClient) error {
			_, err := c.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: 1})
			return err
		}, &r.disconnects},
	}
	for _, tc := range calls {
		for _, c := range []adminpb.AdminClient{anon, wrong} {
			if err := tc.call(c); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s without valid credentials = %v, want Unauthenticated", tc.name, err)
			}
		}
		if n := tc.reached.Load(); n != 0 {
			t.Errorf("%s: %d refused calls reached the service", tc.name, n)
		}
		if !a.Protected("/" + adminclient.ServiceName + "/" + tc.name) {
			t.Errorf("%s is not protected", tc.name)
		}
		if err := tc.call(good); err != nil {
			t.Errorf("%s with a token: %v", tc.name, err)
		}
		if n := tc.reached.Load(); n != 1 {
			t.Errorf("%s with a token reached the service %d times, want 1", tc.name, n)
		}
	}
}

func TestAuthConfigErrors(t *testing.T) {
	for name, c := range map[string]admin.AuthConfig{
		"nothing":          {},
		"missing file":     {TokenFile: filepath.Join(t.TempDir(), "nope")},
		"world readable":   {TokenFile: authWriteFile(t, "t", goodToken+"\n", 0o644)},
		"empty":            {TokenFile: authWriteFile(t, "t", "# none\n", 0o600)},
		"short token":      {TokenFile: authWriteFile(t, "t", "short\n", 0o600)},
		"blank identities": {Identities: []string{" ", ""}},
	} {
		if _, err := admin.NewAuthorizer(c); !errors.Is(err, admin.ErrAuthConfig) {
			t.Errorf("%s: NewAuthorizer = %v, want ErrAuthConfig", name, err)
		}
	}
}

func TestAuthMTLS(t *testing.T) {
	p := testpki.New(t)
	sc, sk := p.Issue(t, "seqd-server", true)
	creds, err := admin.ServerTLS(admin.TLSConfig{CertFile: sc, KeyFile: sk, CAFile: p.CAFile()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.NewAuthorizer(admin.AuthConfig{Identities: []string{"operator"}})
	if err != nil {
		t.Fatal(err)
	}
	r, addr := authServe(t, creds, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	client := func(cn string) adminpb.AdminClient {
		c := admin.TLSConfig{CAFile: p.CAFile()}
		if cn != "" {
			c.CertFile, c.KeyFile = p.Issue(t, cn, false)
		}
		cc, err := adminclient.ClientTLS(c)
		if err != nil {
			t.Fatal(err)
		}
		return authDial(t, addr, grpc.WithTransportCredentials(cc))
	}
	for _, tc := range []struct {
		cn   string
		want codes.Code
	}{{"operator", codes.OK}, {"intruder", codes.PermissionDenied}, {"", codes.Unauthenticated}} {
		before := r.setModes.Load()
		_, err := client(tc.cn).SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"})
		if got := status.Code(err); got != tc.want {
			t.Errorf("cert %q: SetMode = %v (%v), want %v", tc.cn, got, err, tc.want)
		}
		if reached := r.setModes.Load() - before; (tc.want == codes.OK) != (reached == 1) {
			t.Errorf("cert %q: SetMode reached the service %d times", tc.cn, reached)
		}
	}
	// A plaintext client cannot even talk to the TLS server.
	c := authDial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if _, err := c.Status(ctx, &adminpb.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext Status against TLS = %v, want Unavailable", err)
	}
	// RequireClientCert refuses the handshake without a certificate.
	if _, err := admin.ServerTLS(admin.TLSConfig{CertFile: sc, KeyFile: sk, RequireClientCert: true}); !errors.Is(err, admin.ErrTLS) {
		t.Errorf("RequireClientCert without a CA = %v, want ErrTLS", err)
	}
}

func TestRedirectError(t *testing.T) {
	err := adminclient.RedirectError("10.0.0.7:7070")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("code %v, want Unavailable", status.Code(err))
	}
	if l, ok := adminclient.LeaderFromError(err); !ok || l != "10.0.0.7:7070" {
		t.Fatalf("LeaderFromError = %q, %v", l, ok)
	}
	if l, ok := adminclient.LeaderFromError(adminclient.RedirectError("")); !ok || l != "" {
		t.Fatalf("unknown leader: LeaderFromError = %q, %v", l, ok)
	}
	for _, e := range []error{nil, errors.New("x"), status.Error(codes.Unavailable, "down")} {
		if _, ok := adminclient.LeaderFromError(e); ok {
			t.Errorf("LeaderFromError(%v) reports a redirect", e)
		}
	}
}
