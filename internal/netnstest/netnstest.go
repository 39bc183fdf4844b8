// Package netnstest builds a multi-host test rig out of Linux network
// namespaces: every "host" is a namespace with one interface, eth0,
// joined by a veth pair to a bridge that lives in a namespace of its own
// (the rig's switch), so nothing is added to the machine's own network
// namespace. Hosts take addresses from 198.51.100.0/24 (TEST-NET-2, a
// documentation range): every packet stays inside the rig.
//
// Namespaces are named with a per-process prefix (seqdrig-PID-N-), so
// tests in parallel packages cannot collide, and every rig is deleted at
// the end of its test; New also deletes the namespaces of earlier test
// processes that no longer run (a killed run's leftovers).
//
// Processes run on a host through `ip netns exec NS ...` (Host.Command):
// real binaries, or a test's own helper programs, so that a client on
// another host is a different process with a different address, as in
// production.
//
// Enter (enter.go) is the lighter form for a single test: the test
// re-runs itself inside one namespace of its own with extra loopback
// addresses.
package netnstest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Prefix starts the name of every namespace a rig creates.
const Prefix = "seqdrig-"

// Subnet is the rig's network: hosts get .1, .2, ... of it.
var Subnet = netip.MustParsePrefix("198.51.100.0/24")

var rigSeq atomic.Int64

// Available reports why the rig cannot run here, or "" when it can: it
// needs root and the ip tool with netns support.
func Available() string {
	if os.Geteuid() != 0 {
		return "netnstest: needs root (network namespaces)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "netnstest: the ip tool (iproute2) is not on PATH"
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Sprintf("netnstest: ip netns unavailable: %v: %s", err, bytes.TrimSpace(out))
	}
	return ""
}

// Rig is one set of hosts joined by a bridge.
type Rig struct {
	t      testing.TB
	name   string // namespace prefix of this rig
	sw     string // the switch namespace
	mu     sync.Mutex
	hosts  []*Host
	nextIP netip.Addr
}

// Host is one namespace of a rig.
type Host struct {
	Name string     // the rig's name for it
	NS   string     // the namespace's name (ip netns exec NS)
	Addr netip.Addr // eth0's address
}

// New creates an empty rig (its switch), or skips t with the reason when
// the machine cannot run it. The rig is deleted when t ends.
func New(t testing.TB) *Rig {
	t.Helper()
	if why := Available(); why != "" {
		t.Skip(why)
	}
	CleanLeftovers()
	r := &Rig{
		t:      t,
		name:   fmt.Sprintf("%s%d-%d-", Prefix, os.Getpid(), rigSeq.Add(1)),
		nextIP: Subnet.Addr().Next(),
	}
	r.sw = r.name + "sw"
	t.Cleanup(r.Close)
	if err := r.run("ip", "netns", "add", r.sw); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ip", "-n", r.sw, "link", "set", "lo", "up"},
		{"ip", "-n", r.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", r.sw, "link", "set", "br0", "up"},
	} {
		if err := r.run(args...); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// AddHost creates a host named name with the next free address.
func (r *Rig) AddHost(name string) *Host {
	r.t.Helper()
	r.mu.Lock()
	addr := r.nextIP
	r.nextIP = addr.Next()
	idx := len(r.hosts)
	h := &Host{Name: name, NS: r.name + name, Addr: addr}
	r.hosts = append(r.hosts, h)
	r.mu.Unlock()
	if !Subnet.Contains(addr) || addr == netip.MustParseAddr("198.51.100.255") {
		r.t.Fatalf("netnstest: out of addresses in %v", Subnet)
	}
	port := fmt.Sprintf("p%d", idx) // the bridge's side, in the switch namespace
	cidr := netip.PrefixFrom(addr, Subnet.Bits()).String()
	for _, args := range [][]string{
		{"ip", "netns", "add", h.NS},
		{"ip", "-n", h.NS, "link", "set", "lo", "up"},
		{"ip", "-n", r.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"ip", "-n", r.sw, "link", "set", port, "master", "br0"},
		{"ip", "-n", r.sw, "link", "set", port, "up"},
		{"ip", "-n", h.NS, "addr", "add", cidr, "dev", "eth0"},
		{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
	} {
		if err := r.run(args...); err != nil {
			r.t.Fatal(err)
		}
	}
	return h
}

// Shape sets the root qdisc of the switch's port to h, which queues what
// the switch forwards to h, to qdisc in tc's words ("tbf", "rate",
// "20mbit", ...): a bottleneck on h's link, as at a switch port. Stats
// reads its counters back.
func (r *Rig) Shape(h *Host, qdisc ...string) error {
	port, err := r.port(h)
	if err != nil {
		return err
	}
	return r.run(append([]string{"ip", "netns", "exec", r.sw, "tc", "qdisc", "replace", "dev", port, "root"}, qdisc...)...)
}

// Stats is `tc -s qdisc show` of the switch's port to h.
func (r *Rig) Stats(h *Host) (string, error) {
	port, err := r.port(h)
	if err != nil {
		return "", err
	}
	out, err := exec.Command("ip", "netns", "exec", r.sw, "tc", "-s", "qdisc", "show", "dev", port).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("netnstest: tc -s qdisc show dev %s: %v: %s", port, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// port is the name of the switch's port to h.
func (r *Rig) port(h *Host) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.hosts {
		if x == h {
			return fmt.Sprintf("p%d", i), nil
		}
	}
	return "", fmt.Errorf("netnstest: host %s is not of this rig", h.Name)
}

// Hosts are the rig's hosts in the order they were added.
func (r *Rig) Hosts() []*Host {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Host(nil), r.hosts...)
}

// Command returns a command that runs name with args on h: `ip netns exec`.
// The process gets SIGKILL if the test process dies first.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// HostPort is h's address with port.
func (h *Host) HostPort(port int) string {
	return netip.AddrPortFrom(h.Addr, uint16(port)).String()
}

// Close kills what still runs in the rig's namespaces and deletes them.
func (r *Rig) Close() {
	r.mu.Lock()
	hosts := r.hosts
	r.hosts = nil
	r.mu.Unlock()
	for _, h := range hosts {
		killNS(h.NS)
		exec.Command("ip", "netns", "del", h.NS).Run()
	}
	killNS(r.sw)
	exec.Command("ip", "netns", "del", r.sw).Run()
}

func (r *Rig) run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netnstest: %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// killNS sends SIGKILL to every process in namespace ns.
func killNS(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// CleanLeftovers deletes the rig namespaces of test processes that no
// longer run (killed runs), and kills what still runs inside them.
func CleanLeftovers() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], Prefix) {
			continue
		}
		ns := f[0]
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(ns, Prefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		killNS(ns)
		exec.Command("ip", "netns", "del", ns).Run()
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
