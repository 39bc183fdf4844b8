package admin_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/admintest"
)

// TestOffLoopbackNeedsAuth is item 3 of issue 26: an admin plane off
// loopback served Advance, SetMode and TransferLeader to anyone. New and
// Serve now refuse a non-loopback address without Auth, naming the fix,
// unless InsecureNoAuth says so.
func TestOffLoopbackNeedsAuth(t *testing.T) {
	auth := authorizer(t)
	for _, tc := range []struct {
		addr     string
		auth     bool
		insecure bool
		ok       bool
	}{
		{"127.0.0.1:0", false, false, true},
		{"[::1]:0", false, false, true},
		{"localhost:7070", false, false, true},
		{"0.0.0.0:7070", false, false, false},
		{":7070", false, false, false},
		{"198.51.100.7:7070", false, false, false},
		{"seqd.example:7070", false, false, false},
		{"0.0.0.0:7070", true, false, true},
		{"0.0.0.0:7070", false, true, true},
	} {
		cfg := admin.Config{Addr: tc.addr, Logger: quietLogger(), InsecureNoAuth: tc.insecure}
		if tc.auth {
			cfg.Auth = auth
		}
		_, err := admin.New(cfg, admintest.NewBackend(nil))
		if tc.ok != (err == nil) {
			t.Errorf("New(Addr %s, auth %v, insecure %v) = %v, want ok %v", tc.addr, tc.auth, tc.insecure, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, admin.ErrNoAuth) || !strings.Contains(err.Error(), "InsecureNoAuth") || !strings.Contains(err.Error(), tc.addr)) {
			t.Errorf("New(Addr %s) error %q: want ErrNoAuth naming the address and the fix", tc.addr, err)
		}
	}
	// Serve checks the listener it is given, whatever Config.Addr said.
	srv, err := admin.New(admin.Config{Logger: quietLogger()}, admintest.NewBackend(nil))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(lis); !errors.Is(err, admin.ErrNoAuth) {
		srv.Stop()
		t.Fatalf("Serve on %s without Auth = %v, want ErrNoAuth", lis.Addr(), err)
	}
}

func authorizer(t *testing.T) *admin.Authorizer {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte("s3cret-token-for-pprof\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: f, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPprofOffLoopbackNeedsToken: pprof served off loopback with no
// credential showed the process's internals to anyone. ServeMetrics now
// refuses it unless told to accept it; with a token file pprof needs a
// token while /metrics and /healthz stay open to scrapers and probes.
func TestPprofOffLoopbackNeedsToken(t *testing.T) {
	reg := prometheus.NewRegistry()
	if srv, err := admin.ServeMetrics("0.0.0.0:0", reg, quietLogger(), admin.WithPprof(true)); !errors.Is(err, admin.ErrNoAuth) ||
		!strings.Contains(err.Error(), "-admin-token-file") {
		if srv != nil {
			srv.Close()
		}
		t.Fatalf("pprof off loopback without a token = %v, want ErrNoAuth naming -admin-token-file", err)
	}
	for _, opts := range [][]admin.MetricsOption{
		{admin.WithPprof(false)},
		{admin.WithPprof(true), admin.WithInsecureNoAuth(true)},
	} {
		srv, err := admin.ServeMetrics("0.0.0.0:0", reg, quietLogger(), opts...)
		if err != nil {
			t.Fatalf("ServeMetrics off loopback (no pprof, or insecure): %v", err)
		}
		srv.Close()
	}
	srv, err := admin.ServeMetrics("0.0.0.0:0", reg, quietLogger(), admin.WithPprof(true), admin.WithAuth(authorizer(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Addr)
	base := "http://127.0.0.1:" + port
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/pprof/cmdline", "wrong", http.StatusUnauthorized},
		{"/debug/pprof/", "s3cret-token-for-pprof", http.StatusOK},
		{"/metrics", "", http.StatusOK},
		{"/healthz", "", http.StatusOK},
	} {
		if got := get(c.path, c.token); got != c.want {
			t.Errorf("GET %s (token %q) = %d, want %d", c.path, c.token, got, c.want)
		}
	}
}
