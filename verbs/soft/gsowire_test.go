//go:build linux

package soft_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
	"github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

// scapyPython is the Python with scapy (Debian's python3-scapy).
const scapyPython = "/usr/bin/python3"

// scapyCheck reads Ethernet frames in hex, one a line, and prints for each
// RoCEv2 frame "ok ID" or "bad ID": whether scapy's own ICRC computation
// (scapy.contrib.roce, over the frame's real IPv4 header) matches the
// ICRC the frame carries. Other frames print "other".
const scapyCheck = `
import sys, binascii
from scapy.all import Ether, IP
from scapy.contrib.roce import BTH
for line in sys.stdin:
    raw = binascii.unhexlify(line.strip())
    p = Ether(raw)
    if BTH not in p or IP not in p:
        print("other", flush=True)
        continue
    end = 14 + p[IP].len
    print("ok" if raw[end-4:end] == p[BTH].compute_icrc(None) else "bad", p[IP].id, flush=True)
`

// vethPair is two network namespaces joined by a veth pair: a (side A)
// and b (side B), with addresses 198.51.100.1 and .2.
type vethPair struct {
	nsA, nsB string
	ipA, ipB string
}

// newVethPair makes the pair, or skips t where it cannot (no root, no ip
// or ethtool). Transmit UDP segmentation is off on both sides, so the
// kernel cuts GSO messages into segments in software (inet_gso_segment)
// before a capture sees them, and GRO is off on B's, so B sees every
// segment.
func newVethPair(t *testing.T) *vethPair {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespaces")
	}
	if why := netnstest.Available(); why != "" {
		t.Skip(why)
	}
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Skip("ethtool is not installed")
	}
	netnstest.CleanLeftovers()
	base := fmt.Sprintf("%s%d-veth%d-", netnstest.Prefix, os.Getpid(), time.Now().UnixNano()%1e6)
	v := &vethPair{nsA: base + "a", nsB: base + "b", ipA: "198.51.100.1", ipB: "198.51.100.2"}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", v.nsA).Run()
		exec.Command("ip", "netns", "del", v.nsB).Run()
	})
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	run("ip", "netns", "add", v.nsA)
	run("ip", "netns", "add", v.nsB)
	run("ip", "-n", v.nsA, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", v.nsB)
	run("ip", "-n", v.nsA, "addr", "add", v.ipA+"/24", "dev", "va")
	run("ip", "-n", v.nsB, "addr", "add", v.ipB+"/24", "dev", "vb")
	for _, ns := range []string{v.nsA, v.nsB} {
		run("ip", "-n", ns, "link", "set", "lo", "up")
	}
	run("ip", "-n", v.nsA, "link", "set", "va", "up")
	run("ip", "-n", v.nsB, "link", "set", "vb", "up")
	run("ip", "netns", "exec", v.nsA, "ethtool", "-K", "va", "tx-udp-segmentation", "off")
	run("ip", "netns", "exec", v.nsB, "ethtool", "-K", "vb", "gro", "off", "tx-udp-segmentation", "off")
	return v
}

// inNS runs f on an OS thread that has entered network namespace ns:
// sockets f creates live there.
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			f()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("entering %s: %v", ns, err)
	}
}

// pktCapture is an AF_PACKET socket on one interface.
type pktCapture struct{ fd int }

// openPktCapture captures on ifname: received IPv4 frames, or with
// both, sent frames too (ETH_P_ALL).
func openPktCapture(t *testing.T, ifname string, both bool) *pktCapture {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	proto := htons(unix.ETH_P_IP)
	if both {
		proto = htons(unix.ETH_P_ALL)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return &pktCapture{fd: fd}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// roceFrames reads frames until it has n RoCEv2 frames (UDP to 4791) or
// the timeout passes, and returns them (Ethernet header included).
func (c *pktCapture) roceFrames(n int, timeout time.Duration) [][]byte {
	var out [][]byte
	buf := make([]byte, 1<<16)
	end := time.Now().Add(timeout)
	for len(out) < n && time.Now().Before(end) {
		k, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil || k < 14+28 {
			continue
		}
		f := buf[:k]
		ip := f[14:]
		if binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_IP || ip[9] != 17 ||
			binary.BigEndian.Uint16(ip[22:]) != verbs.RoCEv2Port {
			continue
		}
		out = append(out, bytes.Clone(f))
	}
	return out
}

// scapyVerdicts runs scapyCheck over frames: one "ok"/"bad" verdict and
// the IPv4 ID per frame.
func scapyVerdicts(t *testing.T, frames [][]byte) (ok []bool, ids []uint16) {
	t.Helper()
	if err := exec.Command(scapyPython, "-c", "import scapy.contrib.roce").Run(); err != nil {
		t.Skipf("%s has no scapy (Debian: python3-scapy): %v", scapyPython, err)
	}
	var in bytes.Buffer
	for _, f := range frames {
		in.WriteString(hex.EncodeToString(f))
		in.WriteByte('\n')
	}
	cmd := exec.Command(scapyPython, "-c", scapyCheck)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scapy: %v: %s", err, stderr.String())
	}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			t.Fatalf("scapy: %q", s.Text())
		}
		id, _ := strconv.Atoi(f[1])
		ok = append(ok, f[0] == "ok")
		ids = append(ids, uint16(id))
	}
	if len(ok) != len(frames) {
		t.Fatalf("scapy judged %d of %d frames: %s", len(ok), len(frames), stderr.String())
	}
	return ok, ids
}

// TestGSOSegmentsOnTheWire: a soft device sends GSO runs (header-only
// SEND_WITH_IMMs, and SENDs with a payload) over a veth whose UDP
// segmentation is off, so the kernel cuts them into segments numbered
// with IPv4 IDs 0, 1, 2...; every frame captured on the far side carries
// an ICRC that scapy, computing it over the frame's real headers, finds
// right; and the soft device there receives every packet.
func TestGSOSegmentsOnTheWire(t *testing.T) {
	v := newVethPair(t)
	var cli, srv verbs.Device
	var capt *pktCapture
	inNS(t, v.nsB, func() {
		capt = openPktCapture(t, "vb", false)
		var err error
		srv, err = soft.Open(v.ipB+":4791", nil)
		if err != nil {
			t.Error(err)
		}
	})
	inNS(t, v.nsA, func() {
		var err error
		cli, err = soft.Open(v.ipA+":0", nil)
		if err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	verbstest.CloseLater(t, "device", srv)
	verbstest.CloseLater(t, "device", cli)
	caps := verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}
	x := verbstest.NewEndAttr(t, cli, verbs.QPInitAttr{Type: verbs.UD, Cap: caps})
	y := verbstest.NewEndAttr(t, srv, verbs.QPInitAttr{Type: verbs.UD, Cap: caps})
	verbstest.BringUp(t, x)
	verbstest.BringUp(t, y)
	const nImm, nPay, payLen = 40, 10, 100
	const total = nImm + nPay
	for i := 0; i < total; i++ {
		verbstest.PostRecv(t, y.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(y.MR, i*256, 256)})
	}
	ah := verbstest.AH(t, x, verbs.Address{GID: y.QP.Address().GID}) // Port 0: 4791
	copy(x.MR.Bytes(), verbstest.Pattern(payLen, 3))
	var wrs []verbs.SendWR
	for i := 0; i < nImm; i++ {
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: uint32(0x1000 + i), AH: ah,
			RemoteQPN: y.QP.QPN(), RemoteQKey: verbs.DefaultQKey})
	}
	verbstest.PostSend(t, x.QP, wrs...)
	wrs = wrs[:0]
	for i := 0; i < nPay; i++ {
		wrs = append(wrs, verbs.SendWR{ID: uint64(nImm + i), Opcode: verbs.OpSendWithImm, Imm: uint32(0x2000 + i),
			AH: ah, RemoteQPN: y.QP.QPN(), RemoteQKey: verbs.DefaultQKey, SG: verbstest.SG(x.MR, 0, payLen)})
	}
	verbstest.PostSend(t, x.QP, wrs...)

	wcs := verbstest.PollN(t, y.RecvCQ, total, 20*time.Second)
	for i, w := range wcs {
		if w.Status != verbs.WCSuccess || w.SrcQP != x.QP.QPN() {
			t.Fatalf("receive %d: %s", i, verbstest.FormatWC(w))
		}
	}
	if n, _ := verbstest.Counter(srv, "rx_icrc_ip_id"); n == 0 {
		t.Errorf("the receiver saw no packet with a non-zero IPv4 ID: the kernel did not segment")
	}

	frames := capt.roceFrames(total, 10*time.Second)
	if len(frames) != total {
		t.Fatalf("captured %d RoCEv2 frames, want %d", len(frames), total)
	}
	ok, ids := scapyVerdicts(t, frames)
	maxID := uint16(0)
	for i := range frames {
		// And this package's own decoder agrees.
		var fr rocev2.Frame
		err := rocev2.DecodeFrame(frames[i][14:], &fr)
		if !ok[i] || err != nil {
			t.Errorf("frame %d (IPv4 ID %d): scapy ICRC ok %v, rocev2.DecodeFrame: %v", i, ids[i], ok[i], err)
		}
		maxID = max(maxID, ids[i])
	}
	if maxID < nImm-1 {
		t.Errorf("largest IPv4 ID captured %d: the %d-packet run was not cut by the kernel", maxID, nImm)
	}
}
