// Package testbin builds the module's commands for tests that run them as
// processes (a seqd to kill -9, to restart on its data directory, or for
// loadgen -spawn to start): each command is built once per test binary
// run, and a test skips with the reason when the go tool is missing.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// Module is the import path the commands are under.
const Module = "github.com/seqd/seqd"

var (
	mu    sync.Mutex
	dir   string
	built = map[string]error{}
)

// Path returns the path of the command built from Module/pkg (for example
// "cmd/seqd"), building it on the first call of this test binary run. It
// skips t when the go tool is not on PATH and fails it when the build
// fails.
func Path(t testing.TB, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("go tool not on PATH: cannot build %s", pkg)
	}
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "seqd-testbin")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	bin := filepath.Join(dir, path.Base(pkg))
	err, done := built[pkg]
	if !done {
		if out, berr := exec.Command("go", "build", "-o", bin, Module+"/"+pkg).CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build ./%s: %v\n%s", pkg, berr, out)
		}
		built[pkg] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Seqd is Path(t, "cmd/seqd").
func Seqd(t testing.TB) string {
	t.Helper()
	return Path(t, "cmd/seqd")
}
