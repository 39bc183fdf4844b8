// Package depstest checks, in tests, what a package links: go list -deps,
// then every dependency against a list of forbidden import paths.
package depstest

import (
	"os/exec"
	"strings"
	"testing"
)

// Forbid fails t for each dependency of pkg (an import path, or "." for
// the package under test) that is one of forbidden or below one of them
// (path prefix at a slash), unless it is listed in allowed. It skips
// without a go tool, and fails if go list names implausibly few
// packages, so that it cannot pass on an empty listing.
func Forbid(t testing.TB, pkg string, forbidden, allowed []string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list the imports: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s named only %d packages: %q", pkg, len(deps), deps)
	}
	ok := make(map[string]bool, len(allowed))
	for _, a := range allowed {
		ok[a] = true
	}
	for _, p := range deps {
		for _, f := range forbidden {
			if (p == f || strings.HasPrefix(p, f+"/")) && !ok[p] {
				t.Errorf("%s links %s (forbidden: %s)", pkg, p, f)
			}
		}
	}
}
