package pdfront_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsStayOut checks that PD's dependencies stay out of seqd and its
// client library: only cmd/seqd-pd imports this package.
func TestDepsStayOut(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/seqd/seqd/cmd/seqd", "github.com/seqd/seqd/client",
		"github.com/seqd/seqd/cmd/seqctl", "github.com/seqd/seqd/cmd/loadgen").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/pingcap/", "github.com/tikv/", "github.com/seqd/seqd/pdfront"} {
			if strings.HasPrefix(p, bad) {
				t.Errorf("seqd, seqctl, loadgen or the client imports %s", p)
			}
		}
	}
}
