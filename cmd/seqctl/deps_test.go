package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoAdminServer (issue 28): seqctl linked the admin server
// (package admin) for the forwarding aliases of adminclient's names
// and admin.DefaultAddr. It must import only the client side.
func TestLinksNoAdminServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list the imports: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, p := range deps {
		if p == "github.com/seqd/seqd/admin" || p == "github.com/seqd/seqd/server" || strings.HasPrefix(p, "go.etcd.io/") {
			t.Errorf("seqctl links %s", p)
		}
	}
}
