package main

import (
	"strings"
	"testing"

	"github.com/seqd/seqd/internal/netnstest"
	seqd "github.com/seqd/seqd/server"
)

// Plaintext off loopback: refused with what to pass (nothing is sent),
// and -insecure excludes the TLS flags.
func TestInsecureFlags(t *testing.T) {
	code, _, errs := seqctl("-admin", "198.51.100.1:7070", "status")
	if code != exitFail || !strings.Contains(errs, "-insecure") || !strings.Contains(errs, "-tls-ca") {
		t.Errorf("plaintext off loopback = %d %q, want exit 1 naming -insecure and -tls-ca", code, errs)
	}
	code, _, errs = seqctl("-admin", "198.51.100.1:7070", "-insecure", "-tls-ca", "ca.pem", "status")
	if code != exitUsage || !strings.Contains(errs, "-insecure excludes") {
		t.Errorf("-insecure with -tls-ca = %d %q, want a usage error", code, errs)
	}
}

// seqctl -insecure against a seqd on 198.51.100.7 (a network namespace of
// the test's own); a token goes with it in the clear.
func TestInsecureOffLoopback(t *testing.T) {
	if !netnstest.Enter(t, "198.51.100.7/32") {
		return
	}
	tokens := writeToken(t, "insecure-test-operator-token")
	addr := runSeqd(t, seqd.Config{Device: "198.51.100.7:0", Admin: "198.51.100.7:0",
		Security: seqd.SecurityConfig{TokenFile: tokens}})
	if code, out, errs := seqctl("-admin", addr, "-insecure", "status"); code != exitOK || !strings.Contains(out, "mode") {
		t.Fatalf("-insecure status = %d %q %q", code, out, errs)
	}
	if code, _, errs := seqctl("-admin", addr, "-insecure", "-token-file", tokens, "set-mode", "spec-s0"); code != exitOK {
		t.Fatalf("-insecure -token-file set-mode = %d %q", code, errs)
	}
}
