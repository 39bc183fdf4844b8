package e2e

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/server"
)

// snippet is one ```go block of a document.
type snippet struct {
	file string
	line int
	src  string
}

// goSnippets returns the ```go blocks of the markdown file at path.
func goSnippets(t *testing.T, path string) []snippet {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &snippet{file: filepath.Base(path), line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.src += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated ```go block", path, cur.line)
	}
	return out
}

// TestDocSnippets builds every ```go block of README.md and
// docs/operations.md as a program of its own, in a module of its own
// outside this repository's packages (require github.com/seqd/seqd,
// replaced by this tree; offline, from the module cache), and runs it
// against seqd as the documents start it: `make run`'s defaults (admin
// 127.0.0.1:7070, data plane 127.0.0.1:4791), and for a block that dials
// 127.0.0.1:7071 the README's HA group of three (admin 127.0.0.1:7071-7073,
// data plane 127.0.0.1:4811/4821/4831, on etcd), and for a block that
// dials 127.0.0.1:3379 seqd-pd in front of the first, switched to mode
// fasst. (make check-guide builds the PD blocks with the go.mod the
// documents give them instead.) It runs in a network
// namespace of its own so those fixed ports are free (root; it skips
// without), and needs etcd for the HA block.
func TestDocSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a program per snippet")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var snips []snippet
	for _, doc := range []string{"README.md", "docs/operations.md"} {
		snips = append(snips, goSnippets(t, filepath.Join(root, doc))...)
	}
	if len(snips) == 0 {
		t.Fatal("no ```go blocks found")
	}
	if !netnstest.Inside(t) {
		// The builds inside are offline: first fetch, with the network,
		// the module graph each snippet's module loads (go.mod files that
		// this repository's own builds prune away; a fresh machine's
		// module cache lacks them).
		for _, s := range snips {
			if out, err := prefetchSnippet(t, root, s.src); err != nil {
				t.Fatalf("%s:%d: fetching its modules: %v\n%s", s.file, s.line, err, out)
			}
		}
	}
	if !netnstest.Enter(t) {
		return
	}
	quiet := slog.New(slog.DiscardHandler)
	// make run: ./bin/seqd with its defaults.
	startFixed(t, server.Config{Metrics: "off", Data: t.TempDir()}, quiet)
	for _, s := range snips {
		name := fmt.Sprintf("%s:%d", s.file, s.line)
		t.Run(name, func(t *testing.T) {
			if !strings.HasPrefix(s.src, "package main\n") {
				t.Fatalf("%s is not a complete program (package main): every Go snippet must run as written", name)
			}
			if strings.Contains(s.src, "127.0.0.1:7071") {
				startHAGroup(t.Context(), t, quiet) // until this subtest ends
			}
			if strings.Contains(s.src, "127.0.0.1:3379") {
				// seqd-pd, as the documents start it: in front of a seqd
				// in mode fasst (PD's client merges concurrent calls into
				// requests for many values, which only fasst serves).
				setMode(t, "127.0.0.1:7070", "fasst")
				t.Cleanup(func() { setMode(t, "127.0.0.1:7070", "spec-s0") })
				startPDFront(t)
			}
			out, err := runSnippet(t, root, s.src)
			t.Logf("%s output:\n%s", name, out)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		})
	}
}

// startFixed runs seqd in-process with c (its own fixed addresses: the
// defaults unless c sets them) until the test ends.
func startFixed(t *testing.T, c server.Config, log *slog.Logger) {
	t.Helper()
	c.Init = true // a fresh data directory: a new deployment
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, c, log, func(a server.Addrs) { ready <- a }) }()
	select {
	case <-ready:
		t.Cleanup(func() { cancel(); <-done })
	case err := <-done:
		cancel()
		t.Fatalf("seqd %s: %v", c.Admin, err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("seqd %s did not start", c.Admin)
	}
}

// startHAGroup starts the README's HA group (three instances, admin
// 127.0.0.1:7071-7073) on a one-member etcd and waits for a leader. It
// serves until t ends.
func startHAGroup(ctx context.Context, t *testing.T, log *slog.Logger) {
	t.Helper()
	etcd := hatest.Start(t, 1)
	for i := 1; i <= 3; i++ {
		startFixed(t, server.Config{Admin: fmt.Sprintf("127.0.0.1:707%d", i), Device: fmt.Sprintf("127.0.0.1:48%d1", i),
			Metrics: "off", Data: t.TempDir(),
			HA: server.HAConfig{EtcdEndpoints: strings.Join(etcd.Endpoints(), ","), EtcdPrefix: "/seqd/prod", LeaseTTL: 3 * time.Second}}, log)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		for i := 1; i <= 3; i++ {
			if leader(wctx, fmt.Sprintf("127.0.0.1:707%d", i)) {
				return
			}
		}
		select {
		case <-wctx.Done():
			t.Fatal("the HA group elected no leader in 30s")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setMode switches the seqd at addr to mode.
func setMode(t *testing.T, addr, mode string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("seqd %s: %v", addr, err)
	}
	defer cc.Close()
	if _, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: mode}); err != nil {
		t.Fatalf("seqd %s: set-mode %s: %v", addr, mode, err)
	}
}

func leader(ctx context.Context, addr string) bool {
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		return false
	}
	defer cc.Close()
	st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
	return err == nil && st.GetRole() == adminclient.RoleLeader
}

// snippetModule writes src as the main package of a module of its own
// (require github.com/seqd/seqd, replaced by root) and returns its
// directory.
func snippetModule(t *testing.T, root, src string) (string, error) {
	dir := t.TempDir()
	gomod := fmt.Sprintf("module snippet\n\ngo 1.26\n\nrequire github.com/seqd/seqd v0.0.0\n\nreplace github.com/seqd/seqd => %s\n", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// prefetchSnippet loads the module graph of src's module, and downloads
// its packages' modules, through the module proxy.
func prefetchSnippet(t *testing.T, root, src string) (string, error) {
	dir, err := snippetModule(t, root, src)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	list := exec.CommandContext(ctx, "go", "list", "-deps", ".")
	list.Dir = dir
	list.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	out, err := list.CombinedOutput()
	return string(out), err
}

// runSnippet builds src as the main package of a fresh module that
// requires github.com/seqd/seqd (replaced by root) and runs it.
func runSnippet(t *testing.T, root, src string) (string, error) {
	t.Helper()
	dir, err := snippetModule(t, root, src)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", "snippet", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return string(out), fmt.Errorf("go build: %w", err)
	}
	rctx, rcancel := context.WithTimeout(t.Context(), time.Minute)
	defer rcancel()
	prog := exec.CommandContext(rctx, filepath.Join(dir, "snippet"))
	out, err := prog.CombinedOutput()
	return string(out), err
}
