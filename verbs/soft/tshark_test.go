//go:build linux

package soft_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// tsharkFields are the fields the test asks tshark for, in this order.
var tsharkFields = []string{
	"frame.protocols",
	"infiniband.bth.opcode",
	"infiniband.bth.destqp",
	"infiniband.immdt",
	"infiniband.deth.srcqp",
	"infiniband.deth.q_key",
}

const (
	fProtocols = iota
	fOpcode
	fDestQP
	fImm
	fSrcQP
	fQKey
)

// opUDSendOnlyImm is the BTH opcode of a UD SEND_ONLY_WITH_IMMEDIATE.
const opUDSendOnlyImm = 0x65

// TestTShark captures header-only UD SEND_WITH_IMMs on loopback and checks
// that tshark dissects them as RoCEv2 with the opcode, destination QP,
// immediate, source QP and Q_Key the provider was asked for.
func TestTShark(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tshark")
	}
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed")
	}
	port := freeUDPPort(t)
	a := openSoft(t, "127.0.0.1:0", "queues=1")
	verbstest.CloseLater(t, "device", a)
	b := openSoft(t, fmt.Sprintf("127.0.0.1:%d", port), "queues=1")
	verbstest.CloseLater(t, "device", b)
	x, y := verbstest.UDPair(t, a, b)
	if p := y.QP.Address().Port; int(p) != port {
		t.Fatalf("QP on device 127.0.0.1:%d has address %v", port, y.QP.Address())
	}
	ah := verbstest.AH(t, x, y.QP.Address())
	send := func(id uint64, imm uint32) {
		t.Helper()
		// One WR per PostSend: one datagram each, never a GSO super-packet.
		verbstest.PostSend(t, x.QP, verbs.SendWR{ID: id, Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled,
			Imm: imm, AH: ah, RemoteQPN: y.QP.QPN(), RemoteQKey: verbs.DefaultQKey})
		verbstest.ExpectWC(t, verbstest.PollOne(t, x.SendCQ, verbstest.DefaultTimeout), id, verbs.WCSend)
	}

	dropBase, _ := verbstest.Counter(b, verbs.CounterDropNoRecv)
	c := startTShark(t, bin, port)

	// Capture starts some time after "Capturing on": send unanswered
	// warm-up packets until tshark shows one.
	const warm = 0xaaaa0000
	warmDeadline := time.After(20 * time.Second)
	var warmed uint64
warmUp:
	for k := uint32(0); ; k++ {
		send(uint64(100+k), warm|k)
		warmed++
		tick := time.After(200 * time.Millisecond)
		for {
			select {
			case f := <-c.lines:
				if imm, ok := parseImm(f[fImm]); ok && imm&0xffff0000 == warm {
					break warmUp
				}
				t.Fatalf("unexpected packet during warm-up: %q", f)
			case <-tick:
				continue warmUp
			case <-c.exited:
				t.Fatalf("tshark exited during warm-up: %s", c.stderr())
			case <-warmDeadline:
				t.Fatalf("tshark showed none of %d warm-up packets in 20s: %s", k+1, c.stderr())
			}
		}
	}

	// The warm-up packets found no RECV: wait until b has dropped them all,
	// so that none lands in the RECVs posted next.
	verbstest.WaitCounter(t, b, verbs.CounterDropNoRecv, dropBase+warmed, verbstest.DefaultTimeout)

	imms := []uint32{0x5e9d0001, 0x5e9d0002, 0xfeedf00d}
	for i, imm := range imms {
		verbstest.PostRecv(t, y.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(y.MR, 0, verbs.GRHLen)})
		send(uint64(i), imm)
		wc := verbstest.PollOne(t, y.RecvCQ, verbstest.DefaultTimeout)
		verbstest.ExpectWC(t, wc, uint64(i), verbs.WCRecv)
		if wc.Imm != imm {
			t.Errorf("received imm %#x, want %#x", wc.Imm, imm)
		}
	}

	seen := map[uint32]bool{}
	deadline := time.After(20 * time.Second)
	for len(seen) < len(imms) {
		var f []string
		select {
		case f = <-c.lines:
		case <-c.exited:
			t.Fatalf("tshark exited before showing all packets (saw %d of %d): %s", len(seen), len(imms), c.stderr())
		case <-deadline:
			t.Fatalf("tshark showed %d of %d packets in 20s: %s", len(seen), len(imms), c.stderr())
		}
		imm, ok := parseImm(f[fImm])
		if ok && imm&0xffff0000 == warm {
			continue
		}
		t.Logf("tshark: %q", f)
		if !ok || !slices.Contains(imms, imm) || seen[imm] {
			t.Errorf("packet with immediate %q: want one each of %#x", f[fImm], imms)
			continue
		}
		seen[imm] = true
		if !strings.Contains(f[fProtocols], ":udp:infiniband") || strings.Contains(f[fProtocols], "eoib") {
			t.Errorf("imm %#x: protocols %q, want RoCEv2 (udp:infiniband)", imm, f[fProtocols])
		}
		if v, err := parseUint(f[fOpcode]); err != nil || v != opUDSendOnlyImm {
			t.Errorf("imm %#x: BTH opcode %q, want %#x (UD SEND_ONLY_WITH_IMMEDIATE)", imm, f[fOpcode], opUDSendOnlyImm)
		}
		if v, err := parseUint(f[fDestQP]); err != nil || verbs.QPN(v) != y.QP.QPN() {
			t.Errorf("imm %#x: BTH destination QP %q, want %v", imm, f[fDestQP], y.QP.QPN())
		}
		if v, err := parseUint(f[fSrcQP]); err != nil || verbs.QPN(v) != x.QP.QPN() {
			t.Errorf("imm %#x: DETH source QP %q, want %v", imm, f[fSrcQP], x.QP.QPN())
		}
		if v, err := parseUint(f[fQKey]); err != nil || v != verbs.DefaultQKey {
			t.Errorf("imm %#x: DETH Q_Key %q, want %#x", imm, f[fQKey], verbs.DefaultQKey)
		}
	}
}

// capture is a running tshark printing one line of fields per packet.
type capture struct {
	lines  chan []string
	exited chan struct{} // closed when tshark has exited
	mu     sync.Mutex
	errb   bytes.Buffer
}

func (c *capture) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimSpace(c.errb.String())
}

// startTShark starts a live capture of UDP port port on lo, decoded as
// RoCEv2, and returns once tshark says it is capturing. It skips the test
// if capturing is not permitted, and stops tshark when the test ends.
func startTShark(t *testing.T, bin string, port int) *capture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	args := []string{"-i", "lo", "-f", fmt.Sprintf("udp port %d", port), "-l", "-n",
		"-a", "duration:110",
		// RoCEv2 (RRoCE) is decoded by the "infiniband" dissector.
		"-d", fmt.Sprintf("udp.port==%d,infiniband", port),
		// tshark 4.0 takes header-only SENDs for Mellanox EoIB otherwise.
		"--disable-heuristic", "mellanox_eoib",
		"-T", "fields"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Skipf("cannot start tshark: %v", err)
	}
	c := &capture{lines: make(chan []string, 1024), exited: make(chan struct{})}
	capturing := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			f := strings.Split(s.Text(), "\t")
			for len(f) < len(tsharkFields) {
				f = append(f, "")
			}
			select {
			case c.lines <- f:
			default: // the test stopped reading
			}
		}
	}()
	go func() {
		defer readers.Done()
		s := bufio.NewScanner(stderr)
		once := sync.Once{}
		for s.Scan() {
			c.mu.Lock()
			c.errb.WriteString(s.Text() + "\n")
			c.mu.Unlock()
			if strings.Contains(s.Text(), "Capturing on") {
				once.Do(func() { close(capturing) })
			}
		}
	}()
	go func() {
		readers.Wait()
		_ = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-c.exited
	})

	select {
	case <-capturing:
		return c
	case <-c.exited:
		msg := c.stderr()
		for _, s := range []string{"ermission", "not permitted", "Couldn't run", "no capture devices", "No such device"} {
			if strings.Contains(msg, s) {
				t.Skipf("capture on lo is not permitted here: %s", msg)
			}
		}
		t.Fatalf("tshark exited before capturing: %s", msg)
	case <-time.After(30 * time.Second):
		t.Fatalf("tshark did not start capturing within 30s: %s", c.stderr())
	}
	return nil
}

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if err := pc.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// parseImm parses tshark's rendering of the 4-byte immediate, which is a
// byte string ("5e9d0001" or "5e:9d:00:01"). tshark 4.0 lists the field
// twice ("5e9d0001,5e9d0001"); the copies must agree.
func parseImm(s string) (uint32, bool) {
	s, ok := single(s)
	if !ok {
		return 0, false
	}
	s = strings.ReplaceAll(s, ":", "")
	if len(s) != 8 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 32)
	return uint32(v), err == nil
}

// parseUint parses a number as tshark prints it: decimal or 0x-hex.
func parseUint(s string) (uint64, error) {
	s, ok := single(s)
	if !ok {
		return 0, fmt.Errorf("field has differing values %q", s)
	}
	return strconv.ParseUint(strings.TrimSpace(s), 0, 64)
}

// single returns the value of a field tshark may list several times,
// comma-separated, and false if the occurrences differ.
func single(s string) (string, bool) {
	vs := strings.Split(s, ",")
	for _, v := range vs[1:] {
		if v != vs[0] {
			return s, false
		}
	}
	return vs[0], true
}
