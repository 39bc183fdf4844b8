package netnstest

// Enter, below, is the single-namespace form: a test re-run inside a
// network namespace of its own with extra addresses on its loopback.

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const envInside = "SEQD_NETNSTEST_INSIDE"

// Inside reports whether t runs inside the namespace Enter made for it
// (so that a test can do, outside it only, what needs the machine's own
// network).
func Inside(t *testing.T) bool { return os.Getenv(envInside) == t.Name() }

// Enter reports whether the test runs inside the namespace. Outside, it
// re-runs the test (only it) under `unshare --net`, fails t if that run
// fails, and returns false: the caller returns. Inside, it brings lo up
// with addrs (each "IP/32") and returns true. Without root or unshare it
// skips t.
func Enter(t *testing.T, addrs ...string) bool {
	t.Helper()
	if Inside(t) {
		for _, args := range append([][]string{{"link", "set", "lo", "up"}}, addrsArgs(addrs)...) {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v\n%s", args, err, out)
			}
		}
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux) for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) for a network namespace")
	}
	cmd := exec.Command(unshare, "--net", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envInside+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a network namespace: %v\n%s", err, out)
	}
	t.Logf("in a network namespace:\n%s", out)
	return false
}

func addrsArgs(addrs []string) [][]string {
	var a [][]string
	for _, ad := range addrs {
		a = append(a, []string{"addr", "add", ad, "dev", "lo"})
	}
	return a
}
