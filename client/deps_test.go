package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanDeps: the client links what a client needs and nothing of the
// server: no Prometheus, no gRPC health or reflection server, no server
// package (the admin server, the modes' servers, the oracle, HA).
func TestLeanDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/seqd/seqd/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/prometheus",
		"google.golang.org/grpc/health",
		"google.golang.org/grpc/reflection",
		"github.com/seqd/seqd/admin", // the server; admin/adminclient and admin/adminpb are allowed below
		"github.com/seqd/seqd/herd",
		"github.com/seqd/seqd/atomics",
		"github.com/seqd/seqd/headeronly",
		"github.com/seqd/seqd/modes",
		"github.com/seqd/seqd/internal/claim",
		"github.com/seqd/seqd/internal/respq",
		"github.com/seqd/seqd/oracle",
		"github.com/seqd/seqd/ha",
		"github.com/seqd/seqd/server",
		"github.com/seqd/seqd/cmd",
		"github.com/seqd/seqd/fasst",
		"github.com/seqd/seqd/darpc",
		"github.com/seqd/seqd/rfp",
	}
	allowed := []string{"github.com/seqd/seqd/admin/adminclient", "github.com/seqd/seqd/admin/adminpb"}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list -deps named only %d packages: %q", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		for _, f := range forbidden {
			f = strings.TrimSuffix(f, "/")
			if p == f || strings.HasPrefix(p, f+"/") {
				ok := false
				for _, a := range allowed {
					ok = ok || p == a
				}
				if !ok {
					t.Errorf("the client depends on %s (forbidden: %s)", p, f)
				}
			}
		}
	}
}
