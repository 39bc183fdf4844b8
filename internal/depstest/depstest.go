// Package depstest checks, in tests, what a package links: go list -deps,
// then every dependency against a list of forbidden import paths, or
// every dependency within a module against a list of allowed ones.
package depstest

import (
	"os/exec"
	"slices"
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
	ok := make(map[string]bool, len(allowed))
	for _, a := range allowed {
		ok[a] = true
	}
	for _, p := range deps(t, pkg) {
		for _, f := range forbidden {
			if under(p, f) && !ok[p] {
				t.Errorf("%s links %s (forbidden: %s)", pkg, p, f)
			}
		}
	}
}

// Only fails t for each dependency of pkg within module (pkg itself
// aside) that allowed does not list, and for each package allowed lists
// that pkg no longer links, so that the list stays exact. allowed maps
// each package to why pkg may link it.
func Only(t testing.TB, pkg, module string, allowed map[string]string) {
	t.Helper()
	ds := deps(t, pkg)
	for _, p := range ds {
		if under(p, module) && p != pkg && allowed[p] == "" {
			t.Errorf("%s links %s, which is not on its list of allowed %s packages", pkg, p, module)
		}
	}
	for p := range allowed {
		if !slices.Contains(ds, p) {
			t.Errorf("%s no longer links %s: take it off the list", pkg, p)
		}
	}
}

// under reports whether import path p is prefix or below it.
func under(p, prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }

// deps is go list -deps pkg. It skips t without a go tool and fails it
// when go list names implausibly few packages.
func deps(t testing.TB, pkg string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list the imports: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	ds := strings.Fields(string(out))
	if len(ds) < 10 {
		t.Fatalf("go list -deps %s named only %d packages: %q", pkg, len(ds), ds)
	}
	return ds
}
