package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
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
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/internal/testpki"
)

const otherToken = "another-token-9876543210"

// setModeCode calls SetMode on a new connection (a new handshake) and
// returns its code.
func setModeCode(t *testing.T, addr string, opts ...grpc.DialOption) codes.Code {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"})
	return status.Code(err)
}

func plainToken(tok string) []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(adminclient.BearerToken(tok, true))}
}

// TestAuthorizerReload: Reload puts the token file's new tokens in force
// at once (the old one refused, the new one accepted); a file that is
// missing, lists no token, holds a short token or is readable by others
// is refused and the tokens in force stay.
func TestAuthorizerReload(t *testing.T) {
	tf := authWriteFile(t, "tokens", goodToken+"\n", 0o600)
	a, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: tf, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := authServe(t, nil, a)
	expect := func(want string) {
		t.Helper()
		for _, tok := range []string{goodToken, otherToken} {
			code := codes.Unauthenticated
			if tok == want {
				code = codes.OK
			}
			if got := setModeCode(t, addr, plainToken(tok)...); got != code {
				t.Fatalf("token %.7s: %v, want %v", tok, got, code)
			}
		}
	}
	expect(goodToken)
	if err := os.WriteFile(tf, []byte(otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	expect(otherToken)
	for _, tc := range []struct {
		name, data string
		mode       os.FileMode
	}{
		{"empty", "", 0o600},
		{"comments only", "# none\n\n", 0o600},
		{"short token", "short\n", 0o600},
		{"readable by others", goodToken + "\n", 0o644},
		{"missing", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(tf)
			if tc.mode != 0 {
				if err := os.WriteFile(tf, []byte(tc.data), tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Reload(); !errors.Is(err, adminclient.ErrTokenFile) {
				t.Fatalf("Reload = %v, want ErrTokenFile", err)
			}
			expect(otherToken)
			if got := setModeCode(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())); got != codes.Unauthenticated {
				t.Fatalf("no token after a failed reload: %v", got)
			}
		})
	}
}

// copyFile copies src over dst.
func copyFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServerCredsReload: after Reload, new handshakes present the new
// certificate and verify clients against the new CA: a client that
// trusts only the new CA, with a certificate of it, is served and
// authorised; a connection made before keeps working; bad PEM keeps the
// key pair in force.
func TestServerCredsReload(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := dir+"/server.pem", dir+"/server-key.pem", dir+"/ca.pem"
	oldPKI, newPKI := testpki.New(t), testpki.New(t)
	install := func(p *testpki.PKI) {
		c, k := p.Issue(t, "seqd-server", true)
		copyFile(t, key, k)
		copyFile(t, cert, c)
		copyFile(t, ca, p.CAFile())
	}
	install(oldPKI)
	sc, err := admin.NewServerTLS(admin.TLSConfig{CertFile: cert, KeyFile: key, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sc.Files(), []string{cert, key, ca}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Files = %q, want %q", got, want)
	}
	a, err := admin.NewAuthorizer(admin.AuthConfig{Identities: []string{"operator"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := authServe(t, sc, a)
	client := func(p *testpki.PKI) grpc.DialOption {
		c, k := p.Issue(t, "operator", false)
		cc, err := adminclient.ClientTLS(adminclient.TLSConfig{CAFile: p.CAFile(), CertFile: c, KeyFile: k})
		if err != nil {
			t.Fatal(err)
		}
		return grpc.WithTransportCredentials(cc)
	}
	oldClient, newClient := client(oldPKI), client(newPKI)
	if got := setModeCode(t, addr, oldClient); got != codes.OK {
		t.Fatalf("old client before: %v", got)
	}
	if got := setModeCode(t, addr, newClient); got != codes.Unavailable {
		t.Fatalf("new client before: %v, want Unavailable", got)
	}
	// A connection made before the rotation.
	before, err := grpc.NewClient(addr, oldClient)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adminpb.NewAdminClient(before).Status(ctx, &adminpb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}

	install(newPKI)
	if err := sc.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := setModeCode(t, addr, newClient); got != codes.OK {
		t.Fatalf("new client after: %v, want OK", got)
	}
	if got := setModeCode(t, addr, oldClient); got != codes.Unavailable {
		t.Fatalf("old client after: %v, want Unavailable", got)
	}
	if _, err := adminpb.NewAdminClient(before).SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"}); err != nil {
		t.Fatalf("the connection made before the rotation: %v", err)
	}

	for _, bad := range []struct{ name, file string }{{"certificate", cert}, {"key", key}, {"CA", ca}} {
		good, err := os.ReadFile(bad.file)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(bad.file, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"), 0o600)
		if err := sc.Reload(); !errors.Is(err, admin.ErrTLS) {
			t.Errorf("bad %s: Reload = %v, want ErrTLS", bad.name, err)
		}
		if got := setModeCode(t, addr, newClient); got != codes.OK {
			t.Errorf("new client after a failed reload (bad %s): %v, want OK", bad.name, got)
		}
		os.WriteFile(bad.file, good, 0o600)
	}
	// A key that is not the certificate's.
	_, otherKey := newPKI.Issue(t, "other", true)
	copyFile(t, key, otherKey)
	if err := sc.Reload(); !errors.Is(err, admin.ErrTLS) {
		t.Errorf("mismatched key: Reload = %v, want ErrTLS", err)
	}
	if got := setModeCode(t, addr, newClient); got != codes.OK {
		t.Errorf("new client after a failed reload (mismatched key): %v, want OK", got)
	}
}

// modeBackend is a backend that can switch modes.
type modeBackend struct{ *admintest.Backend }

func (modeBackend) SetMode(_ context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	return &adminpb.SetModeResponse{Previous: "spec-s0", Mode: req.GetMode()}, nil
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the JSON log lines whose msg is msg.
func (l *lockedBuf) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestAudit: each mutating call is logged once, by one "admin call" line
// with the method, the peer and the identity that asked: the token's
// fingerprint, the allowed certificate identity, or "anonymous" when no
// authorisation is configured. Status is not audited.
func TestAudit(t *testing.T) {
	var logs lockedBuf
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	tf := authWriteFile(t, "tokens", goodToken+"\n", 0o600)
	auth, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: tf, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, withAuth := admintest.Start(t, admin.Config{Logger: log, Auth: auth}, modeBackend{admintest.NewBackend(nil)})
	_, open := admintest.Start(t, admin.Config{Logger: log}, modeBackend{admintest.NewBackend(nil)})

	check := func(name, addr string, opts []grpc.DialOption, wantID string) {
		t.Helper()
		before := len(logs.lines(t, "admin call"))
		if got := setModeCode(t, addr, opts...); got != codes.OK {
			t.Fatalf("%s: SetMode %v", name, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admintest.Client(ctx, t, addr).Status(ctx, &adminpb.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
		got := logs.lines(t, "admin call")[before:]
		if len(got) != 1 {
			t.Fatalf("%s: %d audit lines for one SetMode and one Status, want 1: %v", name, len(got), got)
		}
		m := got[0]
		if m["method"] != "/"+adminclient.ServiceName+"/SetMode" || m["code"] != "OK" || m["identity"] != wantID ||
			!strings.HasPrefix(m["peer"].(string), "127.0.0.1:") || !strings.Contains(m["request"].(string), "herd") {
			t.Fatalf("%s: audit line %v, want SetMode herd OK from 127.0.0.1 by %s", name, m, wantID)
		}
	}
	check("token", withAuth, plainToken(goodToken), "token:"+admin.TokenFingerprint(goodToken))
	check("no authorisation configured", open, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, "anonymous")

	// A refused call: one line from the Authorizer, none from the audit.
	before := len(logs.lines(t, "admin call"))
	if got := setModeCode(t, withAuth, plainToken(otherToken)...); got != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", got)
	}
	if n := len(logs.lines(t, "admin call")) - before; n != 0 {
		t.Fatalf("a refused call has %d audit lines", n)
	}
	refused := logs.lines(t, "admin call refused")
	if len(refused) != 1 || refused[0]["identity"] != "token:"+admin.TokenFingerprint(otherToken) ||
		!strings.HasPrefix(refused[0]["peer"].(string), "127.0.0.1:") {
		t.Fatalf("refused lines %v, want one with the peer and the presented token's fingerprint", refused)
	}
}

// TestAuditCertIdentity: a caller authorised by its client certificate is
// audited by the identity it was allowed as.
func TestAuditCertIdentity(t *testing.T) {
	var logs lockedBuf
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	p := testpki.New(t)
	sc, sk := p.Issue(t, "seqd-server", true)
	creds, err := admin.ServerTLS(admin.TLSConfig{CertFile: sc, KeyFile: sk, CAFile: p.CAFile()})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := admin.NewAuthorizer(admin.AuthConfig{Identities: []string{"operator"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := admintest.Start(t, admin.Config{Logger: log, Auth: auth, Creds: creds}, modeBackend{admintest.NewBackend(nil)})
	cc, ck := p.Issue(t, "operator", false)
	var tc credentials.TransportCredentials
	if tc, err = adminclient.ClientTLS(adminclient.TLSConfig{CAFile: p.CAFile(), CertFile: cc, KeyFile: ck}); err != nil {
		t.Fatal(err)
	}
	if got := setModeCode(t, addr, grpc.WithTransportCredentials(tc)); got != codes.OK {
		t.Fatalf("SetMode: %v", got)
	}
	got := logs.lines(t, "admin call")
	if len(got) != 1 || got[0]["identity"] != "cert:operator" {
		t.Fatalf("audit lines %v, want one by cert:operator", got)
	}
}
