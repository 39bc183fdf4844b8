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
