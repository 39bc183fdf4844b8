package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func nsExists(name string) bool {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// A rig's hosts get consecutive addresses of Subnet and route to each
// other through eth0 (the e2e/multihost tests send over it); Close deletes every namespace; New deletes the
// leftovers of test processes that are gone, and only those.
func TestRigAndLeftovers(t *testing.T) {
	if why := Available(); why != "" {
		t.Skip(why)
	}
	// A dead process's leftover (no process has PID 2^22+1: pid_max is at
	// most 2^22) and one of a live process (this one).
	dead := fmt.Sprintf("%s%d-1-x", Prefix, 1<<22+1)
	live := fmt.Sprintf("%s%d-999-x", Prefix, os.Getpid())
	for _, ns := range []string{dead, live} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v %s", ns, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", live).Run(); exec.Command("ip", "netns", "del", dead).Run() })

	var hosts []*Host
	func() {
		r := New(t)
		a, b := r.AddHost("a"), r.AddHost("b")
		hosts = []*Host{a, b}
		if a.Addr.String() != "198.51.100.1" || b.Addr.String() != "198.51.100.2" {
			t.Errorf("addresses %v %v", a.Addr, b.Addr)
		}
		out, err := a.Command("ip", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "198.51.100.1/24") {
			t.Errorf("eth0 on a: %v %s", err, out)
		}
		out, err = a.Command("ip", "route", "get", b.Addr.String()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dev eth0") || !strings.Contains(string(out), "src 198.51.100.1") {
			t.Errorf("route from a to b: %v %s", err, out)
		}
		r.Close()
	}()
	for _, h := range hosts {
		if nsExists(h.NS) {
			t.Errorf("namespace %s left after Close", h.NS)
		}
	}
	if nsExists(dead) {
		t.Errorf("leftover %s of a dead process not deleted", dead)
	}
	if !nsExists(live) {
		t.Errorf("namespace %s of a live process deleted", live)
	}
}
