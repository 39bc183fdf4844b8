package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/seqd/seqd/server"
)

// serve runs realMainEnv with args and env; a seqd that comes up is
// stopped at once. It returns the exit code, stderr and whether it served.
func serve(t *testing.T, args []string, env map[string]string) (int, string, bool) {
	t.Helper()
	served := false
	defer func(f func(server.Addrs, func())) { onServing = f }(onServing)
	onServing = func(_ server.Addrs, stop func()) { served = true; stop() }
	var out strings.Builder
	code := realMainEnv(args, &out, environ(env))
	return code, out.String(), served
}

// TestOffLoopbackNeedsCredential is item 3 of issue 26: the container and
// the Kubernetes manifest served the admin plane on 0.0.0.0 with no token,
// and 3,122 unauthenticated Advances moved timestamps 3,121 days ahead.
// seqd now refuses to start with an admin (or pprof) listener off
// loopback and no credential, naming the fix, unless
// -admin-insecure-no-auth (or its SEQD_ variable) says so.
func TestOffLoopbackNeedsCredential(t *testing.T) {
	base := func(t *testing.T, extra ...string) []string {
		return append([]string{"-data", t.TempDir(), "-init", "-device", "127.0.0.1:0", "-metrics", "off", "-log-level", "error"}, extra...)
	}
	for _, tc := range []struct {
		name  string
		args  func(t *testing.T) []string
		env   map[string]string
		serve bool
		want  []string
	}{
		{"admin on 0.0.0.0", func(t *testing.T) []string { return base(t, "-admin", "0.0.0.0:0") }, nil, false,
			[]string{"0.0.0.0:0", "-admin-token-file", "-admin-allow", "-admin-insecure-no-auth"}},
		{"admin on every address", func(t *testing.T) []string { return base(t, "-admin", ":0") }, nil, false,
			[]string{"-admin-insecure-no-auth"}},
		{"pprof on 0.0.0.0", func(t *testing.T) []string {
			return append(base(t, "-admin", "127.0.0.1:0"), "-pprof", "-metrics", "0.0.0.0:0")
		}, nil, false, []string{"-pprof", "-admin-token-file", "-admin-insecure-no-auth"}},
		{"pprof with mTLS identities only", func(t *testing.T) []string {
			return append(base(t, "-admin", "127.0.0.1:0"), "-pprof", "-metrics", "0.0.0.0:0", "-admin-allow", "ops")
		}, nil, false, []string{"-pprof", "-admin-token-file"}},
		{"admin on 0.0.0.0, insecure flag", func(t *testing.T) []string { return base(t, "-admin", "0.0.0.0:0", "-admin-insecure-no-auth") }, nil, true, nil},
		{"admin on 0.0.0.0, insecure variable", func(t *testing.T) []string { return base(t, "-admin", "0.0.0.0:0") },
			map[string]string{"SEQD_ADMIN_INSECURE_NO_AUTH": "true"}, true, nil},
		{"admin and pprof on 0.0.0.0, token file", func(t *testing.T) []string {
			return append(base(t, "-admin", "0.0.0.0:0", "-admin-token-file", tokenFile(t, "a-token-of-at-least-16-chars")), "-pprof", "-metrics", "0.0.0.0:0")
		}, nil, true, nil},
		{"admin on loopback", func(t *testing.T) []string { return base(t, "-admin", "127.0.0.1:0") }, nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, served := serve(t, tc.args(t), tc.env)
			if served != tc.serve {
				t.Fatalf("served %v (exit %d), want %v:\n%s", served, code, tc.serve, out)
			}
			if !tc.serve && code != 2 {
				t.Errorf("exit %d, want 2 (a configuration error)", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("message does not name %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestAdvanceLimitFlags: -advance-budget reads a duration for hybrid and
// a count for counter; the wrong unit, and negative limits, stop seqd
// before it starts.
func TestAdvanceLimitFlags(t *testing.T) {
	base := func(t *testing.T, extra ...string) []string {
		return append([]string{"-data", t.TempDir(), "-init", "-device", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-metrics", "off", "-log-level", "error"}, extra...)
	}
	for _, tc := range []struct {
		args  []string
		serve bool
	}{
		{[]string{"-advance-budget", "1h", "-advance-budget-window", "1h", "-advance-rate", "2"}, true},
		{[]string{"-format", "counter", "-advance-budget", "1000000"}, true},
		{[]string{"-format", "counter", "-advance-budget", "1h"}, false},
		{[]string{"-advance-budget", "1000000"}, false},
		{[]string{"-advance-budget", "0s"}, false},
		{[]string{"-advance-rate", "-1"}, false},
		{[]string{"-advance-budget-window", "-1h"}, false},
	} {
		code, out, served := serve(t, base(t, tc.args...), nil)
		if served != tc.serve || (!tc.serve && (code != 2 || !strings.Contains(out, "-advance"))) {
			t.Errorf("%v: served %v, exit %d, want served %v:\n%s", tc.args, served, code, tc.serve, out)
		}
	}
}

// TestSecondSeqdOnOneDataDir is item 2 of issue 26: two seqd on one -data
// both started and served 163,840 values twice. The second now exits
// before serving, naming the first (its pid and host) and the lock file.
func TestSecondSeqdOnOneDataDir(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Data: dir, Init: true, Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off"},
			quiet(), func(server.Addrs) { close(up) })
	}()
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("first seqd: %v", err)
	}
	host, _ := os.Hostname()
	code, out, served := serve(t, []string{"-data", dir, "-device", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-metrics", "off"}, nil)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("first seqd: %v", err)
	}
	if served || code != 1 {
		t.Fatalf("second seqd on %s: served %v, exit %d; want exit 1 before serving:\n%s", dir, served, code, out)
	}
	for _, w := range []string{fmt.Sprintf("pid %d", os.Getpid()), "host " + host, "oracle.lock", dir} {
		if !strings.Contains(out, w) {
			t.Errorf("message does not name %q:\n%s", w, out)
		}
	}
	// Once the first has stopped, the directory is free.
	if code, out, served := serve(t, []string{"-data", dir, "-device", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-metrics", "off", "-log-level", "error"}, nil); !served {
		t.Fatalf("seqd after the first stopped: exit %d:\n%s", code, out)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
