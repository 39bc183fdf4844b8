package loadgen

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoServer (issue 28): loadgen imported server for its
// in-process seqd, so that every loadgen binary linked the server, HA and
// 19 etcd packages. The server now comes in through Config.InProcess.
func TestLinksNoServer(t *testing.T) {
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
		switch {
		case p == "github.com/seqd/seqd/server", p == "github.com/seqd/seqd/admin",
			p == "github.com/seqd/seqd/ha", p == "github.com/seqd/seqd/modes",
			strings.HasPrefix(p, "go.etcd.io/"):
			t.Errorf("loadgen links %s", p)
		}
	}
}
