package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/server"
)

func TestSecurityFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-insecure", "-tls-ca", "ca.pem"}, 2, []string{"-insecure excludes"}},
		{[]string{"-tls-cert", "c.pem"}, 2, []string{"-tls-key"}},
		// Plaintext off loopback: refused before anything is sent, with
		// what to pass.
		{[]string{"-admin", "198.51.100.1:7070", "-echo", "-1s"}, 1, []string{"-insecure", "-tls-ca"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain(tc.args, &out, &errb); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr %q does not mention %q", errb.String(), w)
				}
			}
		})
	}
}

// loadgen measures a seqd on another address (198.51.100.7, in a network
// namespace of the test's own) over a plaintext admin plane chosen with
// -insecure: the clients' device by route, then given with -device.
func TestRemoteInsecure(t *testing.T) {
	if !netnstest.Enter(t, "198.51.100.7/32", "198.51.100.8/32") {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Device: "198.51.100.7:0", Admin: "198.51.100.7:0", Metrics: "off", Data: t.TempDir(), Init: true,
			Security: server.SecurityConfig{InsecureNoAuth: true}}, // loadgen needs no mutating RPC
			slog.New(slog.DiscardHandler), func(a server.Addrs) { ready <- a })
	}()
	var addr string
	select {
	case a := <-ready:
		addr = a.Admin
		defer func() { cancel(); <-done }()
	case err := <-done:
		cancel()
		t.Fatalf("seqd: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("seqd did not start in 30s")
	}
	for _, extra := range [][]string{nil, {"-device", "198.51.100.8:0"}} {
		args := append([]string{"-admin", addr, "-insecure", "-duration", "300ms", "-warmup", "100ms", "-echo", "-1s", "-quiet"}, extra...)
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 0 {
			t.Fatalf("loadgen %v: exit %d\n%s\n%s", args, code, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "spec-s0") {
			t.Errorf("loadgen %v: no spec-s0 row in\n%s", args, out.String())
		}
	}
}
