package xdpprobe

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs/soft/internal/xsk"

	"github.com/seqd/seqd/internal/netnstest"
)

// rig is two network namespaces joined by one veth pair: the sender's
// (va, 198.51.100.1) and the receiver's (vb, 198.51.100.2), each with a
// static neighbour entry for the other so no ARP is in the way.
type rig struct {
	nsA, nsB string
	ipA, ipB [4]byte
	ifB      int // vb's ifindex, in nsB
}

const (
	ifA = "va"
	ifB = "vb"
)

// newRig builds the rig or skips t with the reason it cannot.
func newRig(t testing.TB) *rig {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespaces (-short)")
	}
	if why := netnstest.Available(); why != "" {
		t.Skip(why)
	}
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Skip("ethtool is not installed")
	}
	netnstest.CleanLeftovers()
	base := fmt.Sprintf("%s%d-xdp%d-", netnstest.Prefix, os.Getpid(), time.Now().UnixNano()%1e6)
	r := &rig{nsA: base + "a", nsB: base + "b", ipA: [4]byte{198, 51, 100, 1}, ipB: [4]byte{198, 51, 100, 2}}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", r.nsA).Run()
		exec.Command("ip", "netns", "del", r.nsB).Run()
	})
	r.sh(t, "ip netns add "+r.nsA)
	r.sh(t, "ip netns add "+r.nsB)
	r.sh(t, "ip -n "+r.nsA+" link add va type veth peer name vb netns "+r.nsB)
	r.sh(t, "ip -n "+r.nsA+" addr add 198.51.100.1/24 dev va")
	r.sh(t, "ip -n "+r.nsB+" addr add 198.51.100.2/24 dev vb")
	for _, ns := range []string{r.nsA, r.nsB} {
		r.sh(t, "ip -n "+ns+" link set lo up")
	}
	r.sh(t, "ip -n "+r.nsA+" link set va up")
	r.sh(t, "ip -n "+r.nsB+" link set vb up")
	// The sender's GSO messages are cut into segments at va in software
	// in every configuration: an XDP program on vb turns va's GSO off
	// anyway, and the comparison needs the same sender throughout. TSO
	// off too: veth hands a packet to vb's NAPI poll (where GRO and
	// native XDP run) only when the sending side cannot make TSO
	// packets, or the receiving side forwards UDP GRO.
	r.sh(t, "ip netns exec "+r.nsA+" ethtool -K va tx-udp-segmentation off tso off")
	macA, macB := r.mac(t, r.nsA, ifA), r.mac(t, r.nsB, ifB)
	r.sh(t, "ip -n "+r.nsA+" neigh replace 198.51.100.2 lladdr "+macB+" dev va nud permanent")
	r.sh(t, "ip -n "+r.nsB+" neigh replace 198.51.100.1 lladdr "+macA+" dev vb nud permanent")
	if err := inNS(r.nsB, func() error {
		ifi, err := net.InterfaceByName(ifB)
		if err == nil {
			r.ifB = ifi.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// sh runs a command line (split on spaces) and fails t if it fails.
func (r *rig) sh(t testing.TB, line string) {
	t.Helper()
	args := strings.Fields(line)
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", line, err, bytes.TrimSpace(out))
	}
}

func (r *rig) mac(t testing.TB, ns, ifname string) string {
	t.Helper()
	var mac string
	if err := inNS(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err == nil {
			mac = ifi.HardwareAddr.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// inNS runs f on a new OS thread that has entered network namespace ns
// and waits for it. The thread dies with f's goroutine, so it is never
// reused outside ns.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	goNS(ns, func(err error) {
		if err == nil {
			err = f()
		}
		errc <- err
	})
	return <-errc
}

// goNS starts f on a new OS thread in network namespace ns; f gets the
// error of entering it.
func goNS(ns string, f func(error)) {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err != nil {
			err = fmt.Errorf("entering %s: %w", ns, err)
		}
		f(err)
	}()
}

// udpSocket opens a UDP socket bound to ip:port in the calling thread's
// namespace.
func udpSocket(ip [4]byte, port int, nonblock bool) (int, error) {
	typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if nonblock {
		typ |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(unix.AF_INET, typ, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ip, Port: port}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// skipUnsupported skips t when err says the kernel or driver lacks what
// the probe needs, and fails it on any other error.
func skipUnsupported(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, xsk.ErrUnsupported) {
		t.Skip(err)
	}
	t.Fatal(err)
}

// The frame layout the tests read: Ethernet, IPv4 without options, UDP.
const (
	ethLen    = 14
	ipv4Len   = 20
	hdrsLen   = 14 + 20 + 8
	offUDPDst = 14 + 20 + 2
)
