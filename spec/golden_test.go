package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// renderVectors renders each vector as one line, "name: line", each in
// a subtest of its own.
func renderVectors(t *testing.T, vs []vector) string {
	t.Helper()
	var b strings.Builder
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			line, err := v.line()
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			fmt.Fprintf(&b, "%s: %s\n", v.name, line)
		})
	}
	return b.String()
}

// checkGolden compares got with testdata/file, which -update rewrites;
// what names its contents in the failure.
func checkGolden(t *testing.T, file, what, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./spec -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differ from %s (go test ./spec -update rewrites it):\ngot:\n%swant:\n%s", what, path, got, want)
	}
}
