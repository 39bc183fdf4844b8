package main

import (
	"strings"
	"testing"

	"github.com/seqd/seqd/internal/version"
)

func TestVersionCommand(t *testing.T) {
	old := version.Version
	defer func() { version.Version = old }()
	version.Version = "v9.8.7-test"
	var out, errOut strings.Builder
	// No server listens on this address: version must not dial.
	if code := run([]string{"-admin", "127.0.0.1:1", "version"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if got, want := out.String(), "seqctl v9.8.7-test\n"; got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"version", "extra"}, &out, &errOut); code != exitUsage {
		t.Fatalf("version extra: exit %d, want %d", code, exitUsage)
	}
}

// TestVersionFlag is issue 29 item 1: seqctl -version said "flag provided
// but not defined"; all four binaries take it now.
func TestVersionFlag(t *testing.T) {
	old := version.Version
	defer func() { version.Version = old }()
	version.Version = "v9.8.7-test"
	var out, errOut strings.Builder
	if code := run([]string{"-version"}, &out, &errOut); code != exitOK || out.String() != "seqctl v9.8.7-test\n" {
		t.Fatalf("-version: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// TestEnv is issue 29 item 1: seqctl read no variable, so
// SEQD_ADMIN=127.0.0.1:1 seqctl health asked 7070. SEQCTL_ADMIN sets
// -admin now (the command line wins), and a mistyped SEQCTL_ADMN is an
// error.
func TestEnv(t *testing.T) {
	var out, errOut strings.Builder
	// Nothing listens on port 1: health fails naming the address.
	code := runEnv([]string{"-timeout", "2s", "health"}, &out, &errOut, []string{"SEQCTL_ADMIN=127.0.0.1:1"})
	if code != exitFail || !strings.Contains(errOut.String(), "127.0.0.1:1") {
		t.Fatalf("SEQCTL_ADMIN=127.0.0.1:1 health: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	code = runEnv([]string{"health"}, &out, &errOut, []string{"SEQCTL_ADMN=127.0.0.1:1"})
	if code != exitUsage || !strings.Contains(errOut.String(), "SEQCTL_ADMN") {
		t.Fatalf("SEQCTL_ADMN: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := runEnv([]string{"-h"}, &out, &errOut, nil); code != exitOK || !strings.Contains(errOut.String(), "env SEQCTL_ADMIN\n") {
		t.Fatalf("-h: exit %d, stderr %q", code, errOut.String())
	}
}
