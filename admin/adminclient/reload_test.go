package adminclient_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/internal/testpki"
)

const (
	tokA = "reload-token-A-0123456789"
	tokB = "reload-token-B-9876543210"
)

type modeBackend struct{ *admintest.Backend }

func (modeBackend) SetMode(_ context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	return &adminpb.SetModeResponse{Mode: req.GetMode()}, nil
}

func put(t *testing.T, dst, data string) {
	t.Helper()
	if err := os.WriteFile(dst, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func cp(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	put(t, dst, string(b))
}

func setMode(t *testing.T, cc *grpc.ClientConn) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"})
	return status.Code(err)
}

// TestReloadableDialOptions: a long-running client (seqd-pd) follows a
// rotation of its server's token and CA: once its own files hold the new
// ones and its Reloaders ran, the connection it has sends the new token
// and new connections trust the new CA. A file that fails to reload
// leaves the old token in use.
func TestReloadableDialOptions(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	srvDir, cliDir := t.TempDir(), t.TempDir()
	cert, key, stok := filepath.Join(srvDir, "cert.pem"), filepath.Join(srvDir, "key.pem"), filepath.Join(srvDir, "tokens")
	ca, ctok := filepath.Join(cliDir, "ca.pem"), filepath.Join(cliDir, "token")
	pki1, pki2 := testpki.New(t), testpki.New(t)
	serverOf := func(p *testpki.PKI) {
		c, k := p.Issue(t, "seqd-server", true)
		cp(t, key, k)
		cp(t, cert, c)
	}
	serverOf(pki1)
	put(t, stok, tokA+"\n")
	cp(t, ca, pki1.CAFile())
	put(t, ctok, tokA+"\n")

	sc, err := admin.NewServerTLS(admin.TLSConfig{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: stok, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := admintest.Start(t, admin.Config{Logger: quiet, Auth: auth, Creds: sc}, modeBackend{admintest.NewBackend(nil)})

	sec := adminclient.ClientSecurity{TokenFile: ctok, CAFile: ca}
	opts, rs, err := sec.ReloadableDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d reloaders, want 2 (TLS, token)", len(rs))
	}
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	kept := dial()
	if got := setMode(t, kept); got != codes.OK {
		t.Fatalf("before the rotation: %v", got)
	}

	// The server rotates first: CA 2's certificate, token B.
	serverOf(pki2)
	put(t, stok, tokB+"\n")
	if err := sc.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := auth.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := setMode(t, kept); got != codes.Unauthenticated {
		t.Fatalf("old token after the server's rotation: %v, want Unauthenticated", got)
	}
	if got := setMode(t, dial()); got != codes.Unavailable {
		t.Fatalf("new connection trusting CA 1 only: %v, want Unavailable", got)
	}

	// Then the client's files, and its reload.
	cp(t, ca, pki2.CAFile())
	put(t, ctok, tokB+"\n")
	for _, r := range rs {
		if err := r.Reload(); err != nil {
			t.Fatalf("%s: %v", r.Name(), err)
		}
	}
	if got := setMode(t, kept); got != codes.OK {
		t.Fatalf("the kept connection with the reloaded token: %v, want OK", got)
	}
	if got := setMode(t, dial()); got != codes.OK {
		t.Fatalf("a new connection after the client's reload: %v, want OK", got)
	}

	// A bad token file and a bad CA leave B and CA 2 in use.
	put(t, ctok, "")
	put(t, ca, "not PEM")
	for _, r := range rs {
		if err := r.Reload(); !errors.Is(err, adminclient.ErrTokenFile) && !errors.Is(err, adminclient.ErrTLS) {
			t.Fatalf("%s: Reload of a bad file = %v", r.Name(), err)
		}
	}
	if got := setMode(t, dial()); got != codes.OK {
		t.Fatalf("after failed reloads: %v, want OK", got)
	}
}
