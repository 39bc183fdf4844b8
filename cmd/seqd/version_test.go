package main

import (
	"strings"
	"testing"

	"github.com/seqd/seqd/internal/version"
)

func TestVersionFlag(t *testing.T) {
	old, oldOut := version.Version, stdout
	defer func() { version.Version, stdout = old, oldOut }()
	version.Version = "v9.8.7-test"
	for _, arg := range []string{"-version", "--version"} {
		var out, errOut strings.Builder
		stdout = &out
		if code := realMain([]string{arg}, &errOut); code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errOut.String())
		}
		if got, want := out.String(), "seqd v9.8.7-test\n"; got != want {
			t.Fatalf("%s printed %q, want %q", arg, got, want)
		}
	}
}
