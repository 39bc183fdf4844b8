package xdpprobe

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs/soft/internal/xsk"
	"github.com/seqd/seqd/verbs/soft/xdp"
)

// The receive paths TestReceiveRates compares, in the order of a round.
const (
	phDrop      = "xdp-drop"    // native XDP_DROP of port 4791: veth's XDP set-up, no receive
	phUDP       = "udp"         // UDP socket, recvmmsg of 64 datagrams
	phGRO       = "udp-gro"     // UDP socket with UDP_GRO, recvmmsg of 8 super-packets
	phXSK       = "xsk-native"  // native XDP redirect to AF_XDP, copy mode
	phXSKGen    = "xsk-generic" // generic (skb) XDP redirect to AF_XDP, copy mode
	phUDPEcho   = "udp-echo"    // UDP socket: recvmmsg of 64, sendmmsg back
	phGROEcho   = "gro-echo"    // UDP_GRO socket: super-packets sent back with UDP_SEGMENT
	phXSKEcho   = "xsk-echo"    // native XDP to AF_XDP (copy mode), headers swapped, sent from the UMEM
	pacedRate   = 200_000       // packets/s of the paced sender
	segsPerMsg  = 64            // GSO segments per sendmmsg message
	msgsPerCall = 8             // messages per sendmmsg
)

var (
	rxPhases   = []string{phDrop, phUDP, phGRO, phXSK, phXSKGen}
	echoPhases = []string{phUDPEcho, phGROEcho, phXSKEcho}
	phases     = append(slices.Clone(rxPhases), echoPhases...)
)

func isEcho(ph string) bool { return slices.Contains(echoPhases, ph) }

// sample is one thread's or one counter's reading at a window's edge.
type sample struct {
	at                time.Time
	sent, rx, polls   uint64
	empty, busyNs     uint64
	sndCPU, rcvCPU    int64 // ns of thread CPU (schedstat): sender, receiver
	softirqd          int64 // ns of ksoftirqd/* CPU
	vethDrops         uint64
	xskDrops, wakeups uint64
	udp               [2]uint64 // nsB's UDP InDatagrams, RcvbufErrors
	echoed            uint64
	cntCPU            int64 // ns of the echo counter's thread
}

// result is one phase's window.
type result struct {
	phase          string
	pace           uint64
	mpps, sentMpps float64
	// kernNs: CPU ns of the sender's thread and ksoftirqd per packet
	// that reached vb (the receive softirq runs in the sender's
	// context); appNs: the receiving thread's ns per packet in polls
	// that found packets; batch: packets per such poll.
	kernNs, appNs, batch  float64
	emptyPct, vethDropPct float64
	xskDrops, wakeups     uint64
	udpIn, udpBufErr      uint64
	// Echo paths: echoes counted back at the sender, and the CPU of all
	// four threads (sender, echo server, echo counter, ksoftirqd) per
	// echo.
	echoMpps, echoNs float64
}

// counters shared between the loops and the controller: written by one
// thread each, read by the controller.
type counters struct {
	sent, rx, polls, empty atomic.Uint64
	busyNs                 atomic.Uint64 // receiver wall time in polls that found packets
	pace                   atomic.Uint64 // the sender's packets per second; 0: as fast as it can
	sndTid, rcvTid         atomic.Int64
	xsk                    atomic.Pointer[xsk.Socket] // the phase's AF_XDP socket, if any
	echoed                 atomic.Uint64              // echoes the sender's socket received
	cntTid                 atomic.Int64
	wakeups                atomic.Uint64
}

// TestReceiveRates measures 28-byte RoCEv2-sized UDP packets received per
// second, from one sender (UDP GSO, cut into segments at the sender's
// veth) in one namespace, by each receive path in the other, interleaved
// round by round in one run. It reports each path's median rate, its
// ratio to the plain UDP socket's, and the CPU each packet costs, which
// other load on the machine changes less than the rates:
//   - kern: the sender's thread and ksoftirqd per packet that reached vb.
//     veth runs vb's NAPI poll (XDP, GRO, the UDP stack, the copy into
//     the UMEM) in softirq on the sending CPU, so this is the sender's
//     cost plus the kernel's receive cost. The sender's part is the same
//     in every path, so differences between paths are differences in
//     receive cost. On veth every native XDP path starts with a copy of
//     the sender's skb into a page with XDP's 256-byte headroom, which a
//     NIC's driver does not make: xdp-drop shows that floor.
//   - app: the receiving thread's time in polls that found packets, per
//     packet (it busy-polls; empty polls are not counted).
//
// The echo paths (paced only) send every packet back to the sender's
// socket, where a fourth thread counts the echoes; they report echoes a
// second and the CPU of the sender, the echo server (its polls that
// found packets), the counter and ksoftirqd per echo.
//
// It runs only with SEQD_XDPBENCH set (make bench-xdp). SEQD_XDPBENCH_DUR
// is each window (default 1s), SEQD_XDPBENCH_ROUNDS the rounds (default
// 5); with SEQD_XDPBENCH_PERF=DIR, the first round records a system-wide
// perf profile of each window into DIR/PHASE.data.
func TestReceiveRates(t *testing.T) {
	if os.Getenv("SEQD_XDPBENCH") == "" {
		t.Skip("a benchmark: set SEQD_XDPBENCH=1 (make bench-xdp)")
	}
	r := newRig(t)
	dur := envDuration(t, "SEQD_XDPBENCH_DUR", time.Second)
	rounds := envInt(t, "SEQD_XDPBENCH_ROUNDS", 5)
	perfDir := os.Getenv("SEQD_XDPBENCH_PERF")
	perf, _ := exec.LookPath("perf")
	// GRO on vb gives veth a NAPI poll, as a NIC has, in every phase
	// (an XDP program would switch it on anyway).
	r.sh(t, "ip netns exec "+r.nsB+" ethtool -K vb gro on")

	var c counters
	var stopSend atomic.Bool
	sendDone := make(chan error, 1)
	sendFD := make(chan int, 1)
	goNS(r.nsA, func(err error) {
		if err == nil {
			err = sendLoop(r, &c, &stopSend, sendFD)
		}
		sendDone <- err
	})
	fd := <-sendFD
	if fd < 0 {
		t.Fatal(<-sendDone)
	}
	cntDone := make(chan struct{})
	go func() {
		defer close(cntDone)
		echoCount(fd, &c, &stopSend)
	}()
	defer func() {
		stopSend.Store(true)
		<-cntDone
		if err := <-sendDone; err != nil {
			t.Error(err)
		}
	}()
	// The UDP socket on 4791 stays bound all run, so no packet finds the
	// port closed (no ICMP back to the sender) between phases.
	var udpFD int
	if err := inNS(r.nsB, func() (err error) {
		udpFD, err = udpSocket(r.ipB, xsk.RoCEv2Port, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(udpFD)

	var all []result
	for round := range rounds {
		for _, pace := range []uint64{0, pacedRate} {
			c.pace.Store(pace)
			for _, ph := range phases {
				if isEcho(ph) && pace == 0 {
					continue // echoes are compared paced only: unpaced, the sender takes the core the echoes need
				}
				var perfCmd *exec.Cmd
				if perfDir != "" && perf != "" && round == 0 && pace == 0 {
					perfCmd = exec.Command(perf, "record", "-a", "-g", "-F", "1999", "-o", filepath.Join(perfDir, ph+".data"), "--", "sleep", strconv.FormatFloat(dur.Seconds(), 'f', 3, 64))
				}
				res, err := runPhase(t, r, ph, udpFD, &c, dur, perfCmd)
				if err != nil {
					skipUnsupported(t, err)
				}
				res.pace = pace
				if isEcho(ph) {
					t.Logf("round %d pace %7d %-11s rx %6.3f Mpps  echoed %6.3f Mpps  %5.0f ns CPU per echo (all threads)  xsk drops %d  rcvbuf errors %d",
						round, pace, ph, res.mpps, res.echoMpps, res.echoNs, res.xskDrops, res.udpBufErr)
					all = append(all, res)
					continue
				}
				t.Logf("round %d pace %7d %-11s rx %6.3f Mpps (sent %6.3f)  kernel %4.0f ns/pkt  app %4.0f ns/pkt (batch %4.1f, %4.1f%% empty polls)  veth drops %4.1f%%  xsk drops %d wakeups %d  udp in %d rcvbuf errors %d",
					round, pace, ph, res.mpps, res.sentMpps, res.kernNs, res.appNs, res.batch, res.emptyPct, res.vethDropPct, res.xskDrops, res.wakeups, res.udpIn, res.udpBufErr)
				all = append(all, res)
			}
		}
	}
	med := func(pace uint64, ph string, f func(result) float64) float64 {
		var v []float64
		for _, r := range all {
			if r.phase == ph && r.pace == pace {
				v = append(v, f(r))
			}
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	mpps := func(r result) float64 { return r.mpps }
	kern := func(r result) float64 { return r.kernNs }
	app := func(r result) float64 { return r.appNs }
	batch := func(r result) float64 { return r.batch }
	var line []string
	table := func(pace uint64) {
		ref := med(pace, phUDP, mpps)
		refTotal := med(pace, phUDP, kern) + med(pace, phUDP, app)
		t.Logf("%-11s %8s %6s %8s %7s %8s %6s %7s", "path", "rx Mpps", "x udp", "kern ns", "app ns", "total ns", "x udp", "batch")
		for _, ph := range rxPhases {
			m, k, a := med(pace, ph, mpps), med(pace, ph, kern), med(pace, ph, app)
			t.Logf("%-11s %8.3f %6.2f %8.0f %7.0f %8.0f %6.2f %7.1f", ph, m, m/ref, k, a, k+a, (k+a)/refTotal, med(pace, ph, batch))
			id := strings.ReplaceAll(ph, "-", "_")
			if pace == 0 {
				line = append(line, fmt.Sprintf("%s_mpps=%.3f", id, m))
			} else {
				line = append(line, fmt.Sprintf("%s_ns=%.0f", id, k+a))
			}
		}
	}
	t.Logf("medians of %d rounds of %v; as fast as the sender goes:", rounds, dur)
	table(0)
	t.Logf("paced at %d packets/s (fewer drops, which make a path look cheap):", pacedRate)
	table(pacedRate)
	ref := med(0, phUDP, mpps)
	total := func(ph string) float64 { return med(pacedRate, ph, kern) + med(pacedRate, ph, app) }
	line = append(line, fmt.Sprintf("xsk_mpps_over_udp=%.2f xsk_mpps_over_gro=%.2f xsk_ns_over_udp=%.2f xsk_ns_over_gro=%.2f",
		med(0, phXSK, mpps)/ref, med(0, phXSK, mpps)/med(0, phGRO, mpps), total(phXSK)/total(phUDP), total(phXSK)/total(phGRO)))
	t.Logf("echo, paced at %d packets/s:", pacedRate)
	t.Logf("%-11s %11s %6s %9s %6s", "path", "echoed Mpps", "x udp", "CPU ns", "x udp")
	refE, refN := med(pacedRate, phUDPEcho, func(r result) float64 { return r.echoMpps }), med(pacedRate, phUDPEcho, func(r result) float64 { return r.echoNs })
	for _, ph := range echoPhases {
		m, n := med(pacedRate, ph, func(r result) float64 { return r.echoMpps }), med(pacedRate, ph, func(r result) float64 { return r.echoNs })
		t.Logf("%-11s %11.3f %6.2f %9.0f %6.2f", ph, m, m/refE, n, n/refN)
		line = append(line, fmt.Sprintf("%s_ns=%.0f", strings.ReplaceAll(ph, "-", "_"), n))
	}
	fmt.Println(strings.Join(line, " "))
}

// runPhase sets up phase ph's receive path in nsB, lets it warm up, and
// measures one window of dur.
func runPhase(t *testing.T, r *rig, ph string, udpFD int, c *counters, dur time.Duration, perfCmd *exec.Cmd) (result, error) {
	var stop atomic.Bool
	ready := make(chan error, 1)
	done := make(chan error, 1)
	c.rcvTid.Store(0)
	for _, v := range []*atomic.Uint64{&c.rx, &c.polls, &c.empty, &c.busyNs, &c.wakeups} {
		v.Store(0) // the loop's counters start at 0
	}
	goNS(r.nsB, func(err error) {
		var loop func()
		var cleanup []func()
		defer func() {
			for _, f := range slices.Backward(cleanup) {
				f()
			}
			done <- nil
		}()
		if err == nil {
			loop, cleanup, err = setupPhase(r, ph, udpFD, c, &stop)
		}
		ready <- err
		if err != nil {
			return
		}
		pin(1)
		c.rcvTid.Store(int64(unix.Gettid()))
		loop()
	})
	if err := <-ready; err != nil {
		<-done
		return result{}, err
	}
	defer func() {
		stop.Store(true)
		<-done
	}()
	time.Sleep(dur / 4) // warm-up: the first packets of a phase find cold caches and empty rings
	a := takeSample(t, r, c)
	if perfCmd != nil {
		if err := perfCmd.Start(); err != nil {
			t.Logf("perf: %v", err)
			perfCmd = nil
		}
	}
	time.Sleep(dur)
	b := takeSample(t, r, c)
	if perfCmd != nil {
		perfCmd.Wait()
	}
	secs := b.at.Sub(a.at).Seconds()
	rx := float64(b.rx - a.rx)
	sent := float64(b.sent - a.sent)
	res := result{phase: ph, mpps: rx / secs / 1e6, sentMpps: sent / secs / 1e6,
		xskDrops: b.xskDrops - a.xskDrops, wakeups: b.wakeups - a.wakeups,
		udpIn: b.udp[0] - a.udp[0], udpBufErr: b.udp[1] - a.udp[1]}
	if ph == phDrop {
		rx = sent - float64(b.vethDrops-a.vethDrops) // what reached the program
		res.mpps = rx / secs / 1e6
	}
	// The echo server's CPU time split as the receiver's below: it
	// busy-polls, and only its polls that found packets count.
	busyFrac := min(float64(b.busyNs-a.busyNs)/float64(b.at.Sub(a.at)), 1)
	if e := float64(b.echoed - a.echoed); e > 0 {
		res.echoMpps = e / secs / 1e6
		res.echoNs = (float64(b.sndCPU-a.sndCPU+b.cntCPU-a.cntCPU+b.softirqd-a.softirqd) + float64(b.rcvCPU-a.rcvCPU)*busyFrac) / e
	}
	if in := sent - float64(b.vethDrops-a.vethDrops); in > 0 {
		res.kernNs = float64(b.sndCPU-a.sndCPU+b.softirqd-a.softirqd) / in
	}
	if rx > 0 {
		// The receiver's CPU time split in the ratio of its wall time
		// in polls that found packets to the window: other load on the
		// machine preempts it as often in either kind of poll.
		res.appNs = float64(b.rcvCPU-a.rcvCPU) * busyFrac / rx
		if p := (b.polls - a.polls) - (b.empty - a.empty); p > 0 {
			res.batch = rx / float64(p)
		}
	}
	if p := b.polls - a.polls; p > 0 {
		res.emptyPct = 100 * float64(b.empty-a.empty) / float64(p)
	}
	if sent > 0 {
		res.vethDropPct = 100 * float64(b.vethDrops-a.vethDrops) / sent
	}
	return res, nil
}

// setupPhase builds ph's receive path on the calling thread (in nsB) and
// returns its busy-polling loop and what undoes it.
func setupPhase(r *rig, ph string, udpFD int, c *counters, stop *atomic.Bool) (func(), []func(), error) {
	var cleanup []func()
	switch ph {
	case phDrop:
		st, err := xdp.Attach(r.ifB, 1, xsk.Drop, xsk.Native)
		if err != nil {
			return nil, nil, err
		}
		cleanup = append(cleanup, func() { st.Close() })
		return func() {
			for !stop.Load() {
				time.Sleep(time.Millisecond)
			}
		}, cleanup, nil
	case phUDP, phGRO, phUDPEcho, phGROEcho:
		gro := 0
		if ph == phGRO || ph == phGROEcho {
			gro = 1
		}
		if err := unix.SetsockoptInt(udpFD, unix.IPPROTO_UDP, unix.UDP_GRO, gro); err != nil {
			return nil, nil, err
		}
		drainUDP(udpFD)
		if isEcho(ph) {
			return func() { udpEchoLoop(udpFD, gro == 1, c, stop) }, nil, nil
		}
		return func() { udpLoop(udpFD, gro == 1, c, stop) }, nil, nil
	case phXSK, phXSKGen, phXSKEcho:
		m := xsk.Native
		if ph == phXSKGen {
			m = xsk.Generic
		}
		st, err := xdp.Attach(r.ifB, 1, xsk.Redirect, m)
		if err != nil {
			return nil, nil, err
		}
		cleanup = append(cleanup, func() { st.Close() })
		// 8192 RX ring entries: a receiver preempted for a few ms by
		// other load does not overflow it sooner than the UDP socket's
		// 4 MiB buffer.
		s, err := xsk.NewSocket(xsk.SocketConfig{Ifindex: r.ifB, Frames: 16384, TX: ph == phXSKEcho})
		if err != nil {
			return nil, cleanup, err
		}
		c.wakeups.Store(0)
		c.xsk.Store(s)
		cleanup = append(cleanup, func() { c.xsk.Store(nil); s.Close() })
		if err := st.Register(0, s); err != nil {
			return nil, cleanup, err
		}
		if ph == phXSKEcho {
			return func() { xskEchoLoop(s, c, stop) }, cleanup, nil
		}
		return func() { xskLoop(s, c, stop) }, cleanup, nil
	}
	return nil, nil, fmt.Errorf("unknown phase %q", ph)
}

// sendLoop sends 28-byte packets to 198.51.100.2:4791 as fast as it can:
// sendmmsg of msgsPerCall GSO messages of segsPerMsg segments each.
// It sends fd on up once the socket is ready (-1 if it failed): echoes
// come back to it.
func sendLoop(r *rig, c *counters, stop *atomic.Bool, up chan<- int) error {
	fd, err := udpSocket(r.ipA, 0, false)
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrInet4{Addr: r.ipB, Port: xsk.RoCEv2Port})
	}
	if err != nil {
		up <- -1
		return err
	}
	defer unix.Close(fd)
	dup, err := unix.Dup(fd) // the echo counter's own
	if err != nil {
		up <- -1
		return err
	}
	up <- dup
	pin(0)
	c.sndTid.Store(int64(unix.Gettid()))
	payload := make([]byte, 0, segsPerMsg*len(roceIMM))
	for range segsPerMsg {
		payload = append(payload, roceIMM...)
	}
	ctrl := make([]byte, unix.CmsgSpace(2))
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
	cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	cm.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&ctrl[unix.CmsgLen(0)])) = uint16(len(roceIMM))
	var iov unix.Iovec
	iov.Base = &payload[0]
	iov.SetLen(len(payload))
	var hdrs [msgsPerCall]unix.Mmsghdr
	for i := range hdrs {
		hdrs[i].Hdr.Iov = &iov
		hdrs[i].Hdr.SetIovlen(1)
		hdrs[i].Hdr.Control = &ctrl[0]
		hdrs[i].Hdr.SetControllen(len(ctrl))
	}
	var sent, pacedFrom uint64
	var pace uint64
	var start time.Time
	for !stop.Load() {
		if p := c.pace.Load(); p != pace {
			pace, start, pacedFrom = p, time.Now(), sent
		}
		if pace != 0 {
			if d := time.Duration((sent-pacedFrom)*uint64(time.Second)/pace) - time.Since(start); d > 0 {
				time.Sleep(d)
			}
		}
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), msgsPerCall, 0, 0, 0)
		if e != 0 {
			if e == unix.ENOBUFS || e == unix.EAGAIN || e == unix.ECONNREFUSED {
				continue
			}
			return fmt.Errorf("sendmmsg: %v", e)
		}
		sent += uint64(n) * segsPerMsg
		c.sent.Store(sent)
	}
	return nil
}

// udpLoop receives with non-blocking recvmmsg until stop: 64 datagrams
// a call, or with gro 8 super-packets of up to 64 KiB, each counted as
// its segments.
func udpLoop(fd int, gro bool, c *counters, stop *atomic.Bool) {
	n, size := 64, 2048
	if gro {
		n, size = 8, 64<<10
	}
	bufs := make([]byte, n*size)
	ctrl := make([]byte, n*64)
	iovs := make([]unix.Iovec, n)
	hdrs := make([]unix.Mmsghdr, n)
	for i := range hdrs {
		iovs[i].Base = &bufs[i*size]
		iovs[i].SetLen(size)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	var rx, polls, empty, busy uint64
	for !stop.Load() {
		t0 := time.Now()
		for i := range hdrs {
			hdrs[i].Hdr.Control = &ctrl[i*64]
			hdrs[i].Hdr.SetControllen(64)
		}
		got, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
		polls++
		if e != 0 || got == 0 {
			empty++
		} else {
			for i := range int(got) {
				rx += uint64(segments(&hdrs[i], ctrl[i*64:]))
			}
			busy += uint64(time.Since(t0))
			c.busyNs.Store(busy)
		}
		c.rx.Store(rx)
		c.polls.Store(polls)
		c.empty.Store(empty)
	}
}

// segments is how many datagrams a received message holds: its length
// over the UDP_GRO segment size when the kernel coalesced, else one.
func segments(h *unix.Mmsghdr, ctrl []byte) int {
	if h.Hdr.Controllen >= uint64(unix.CmsgLen(4)) {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		if cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO {
			if gs := int(*(*int32)(unsafe.Pointer(&ctrl[unix.CmsgLen(0)]))); gs > 0 {
				return (int(h.Len) + gs - 1) / gs
			}
		}
	}
	return 1
}

func drainUDP(fd int) {
	buf := make([]byte, 64<<10)
	for {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// xskLoop busy-polls the AF_XDP socket until stop, reading each frame's
// BTH opcode (so the packet's bytes are touched, as a provider would).
func xskLoop(s *xsk.Socket, c *counters, stop *atomic.Bool) {
	frames := make([][]byte, 64)
	var rx, polls, empty, busy uint64
	var sink byte
	for !stop.Load() {
		t0 := time.Now()
		n := s.Rx(frames)
		polls++
		if n == 0 {
			empty++
		}
		for _, f := range frames[:n] {
			if len(f) > hdrsLen {
				sink ^= f[hdrsLen]
			}
		}
		s.Refill()
		if n > 0 {
			busy += uint64(time.Since(t0))
			c.busyNs.Store(busy)
		}
		c.wakeups.Store(s.Wakeups())
		rx += uint64(n)
		c.rx.Store(rx)
		c.polls.Store(polls)
		c.empty.Store(empty)
	}
	_ = sink
}

func takeSample(t *testing.T, r *rig, c *counters) sample {
	sm := sample{
		at:        time.Now(),
		sent:      c.sent.Load(),
		rx:        c.rx.Load(),
		polls:     c.polls.Load(),
		empty:     c.empty.Load(),
		busyNs:    c.busyNs.Load(),
		sndCPU:    threadCPU(c.sndTid.Load()),
		cntCPU:    threadCPU(c.cntTid.Load()),
		echoed:    c.echoed.Load(),
		rcvCPU:    threadCPU(c.rcvTid.Load()),
		softirqd:  softirqdCPU(),
		vethDrops: vethTxDropped(t, r),
		wakeups:   c.wakeups.Load(),
		udp:       udpSNMP(t, r),
	}
	if s := c.xsk.Load(); s != nil {
		if st, err := s.Stats(); err == nil {
			sm.xskDrops = st.Rx_dropped + st.Rx_ring_full + st.Rx_fill_ring_empty_descs
		}
	}
	return sm
}

// udpSNMP is nsB's UDP InDatagrams and RcvbufErrors.
func udpSNMP(t *testing.T, r *rig) [2]uint64 {
	out, err := exec.Command("ip", "netns", "exec", r.nsB, "cat", "/proc/net/snmp").Output()
	if err != nil {
		t.Logf("snmp: %v", err)
		return [2]uint64{}
	}
	var names, vals []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Udp: ") {
			if names == nil {
				names = strings.Fields(l)
			} else {
				vals = strings.Fields(l)
			}
		}
	}
	var v [2]uint64
	for i, n := range names {
		if i < len(vals) {
			switch n {
			case "InDatagrams":
				v[0], _ = strconv.ParseUint(vals[i], 10, 64)
			case "RcvbufErrors":
				v[1], _ = strconv.ParseUint(vals[i], 10, 64)
			}
		}
	}
	return v
}

// threadCPU is the CPU time of thread tid of this process, in ns
// (schedstat: it counts softirqs run in the thread's context, which is
// where veth's receive path runs).
func threadCPU(tid int64) int64 {
	if tid == 0 {
		return 0
	}
	return schedstat(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
}

func schedstat(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseInt(f[0], 10, 64)
	return v
}

// softirqdCPU is the CPU time of every ksoftirqd thread, in ns.
func softirqdCPU() int64 {
	var sum int64
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.HasPrefix(string(comm), "ksoftirqd/") {
			sum += schedstat("/proc/" + e.Name() + "/schedstat")
		}
	}
	return sum
}

// vethTxDropped is va's transmit drops: packets veth could not queue to
// vb's NAPI ring because the receive side was behind.
func vethTxDropped(t *testing.T, r *rig) uint64 {
	out, err := exec.Command("ip", "-n", r.nsA, "-s", "-j", "link", "show", ifA).Output()
	if err != nil {
		t.Logf("ip -s link: %v", err)
		return 0
	}
	var links []struct {
		Stats64 struct {
			TX struct {
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal(out, &links) != nil || len(links) == 0 {
		return 0
	}
	return links[0].Stats64.TX.Dropped
}

// pin keeps the calling thread on CPU cpu (mod the CPUs there are), so
// the sender, with the receive softirq it runs, and the receiving thread
// do not take turns on one core.
func pin(cpu int) {
	var set unix.CPUSet
	set.Set(cpu % runtime.NumCPU())
	unix.SchedSetaffinity(0, &set)
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d
	}
	return def
}

func envInt(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	return def
}

// echoCount counts the echoes arriving on fd (a duplicate of the
// sender's socket, which it closes) until stop: blocking recvmmsg of up
// to 64, waking at least every 50 ms to look at stop.
func echoCount(fd int, c *counters, stop *atomic.Bool) {
	defer unix.Close(fd)
	c.cntTid.Store(int64(unix.Gettid()))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000})
	const n = 64
	bufs := make([]byte, n*2048)
	iovs := make([]unix.Iovec, n)
	hdrs := make([]unix.Mmsghdr, n)
	for i := range hdrs {
		iovs[i].Base = &bufs[i*2048]
		iovs[i].SetLen(2048)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	var echoed uint64
	for !stop.Load() {
		got, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), n, unix.MSG_WAITFORONE, 0, 0)
		if e == 0 {
			echoed += uint64(got)
			c.echoed.Store(echoed)
		}
	}
}

// udpEchoLoop is udpLoop's echo server: every datagram (with gro, every
// super-packet, as one GSO message of its segments) goes back to where
// it came from with one sendmmsg per recvmmsg.
func udpEchoLoop(fd int, gro bool, c *counters, stop *atomic.Bool) {
	n, size := 64, 2048
	if gro {
		n, size = 8, 64<<10
	}
	bufs := make([]byte, n*size)
	ctrl := make([]byte, n*64)
	sctrl := make([]byte, n*unix.CmsgSpace(2))
	names := make([]unix.RawSockaddrInet4, n)
	iovs := make([]unix.Iovec, n)
	siovs := make([]unix.Iovec, n)
	hdrs := make([]unix.Mmsghdr, n)
	shdrs := make([]unix.Mmsghdr, n)
	for i := range hdrs {
		iovs[i].Base = &bufs[i*size]
		iovs[i].SetLen(size)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
		siovs[i].Base = &bufs[i*size]
		shdrs[i].Hdr.Iov = &siovs[i]
		shdrs[i].Hdr.SetIovlen(1)
		shdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&names[i]))
		shdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&sctrl[i*unix.CmsgSpace(2)]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
	}
	var rx, polls, empty, busy uint64
	for !stop.Load() {
		t0 := time.Now()
		for i := range hdrs {
			hdrs[i].Hdr.Control = &ctrl[i*64]
			hdrs[i].Hdr.SetControllen(64)
			hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&names[i]))
			hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		}
		got, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
		polls++
		if e != 0 || got == 0 {
			empty++
		} else {
			for i := range int(got) {
				segs := segments(&hdrs[i], ctrl[i*64:])
				rx += uint64(segs)
				siovs[i].SetLen(int(hdrs[i].Len))
				shdrs[i].Hdr.Control, shdrs[i].Hdr.Controllen = nil, 0
				if segs > 1 {
					off := i * unix.CmsgSpace(2)
					*(*uint16)(unsafe.Pointer(&sctrl[off+unix.CmsgLen(0)])) = uint16((int(hdrs[i].Len) + segs - 1) / segs)
					shdrs[i].Hdr.Control = &sctrl[off]
					shdrs[i].Hdr.SetControllen(unix.CmsgSpace(2))
				}
			}
			for sent := 0; sent < int(got); {
				k, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&shdrs[sent])), got-uintptr(sent), unix.MSG_DONTWAIT, 0, 0)
				if e != 0 {
					break // a full socket buffer drops the rest of this batch's echoes
				}
				sent += int(k)
			}
			busy += uint64(time.Since(t0))
			c.busyNs.Store(busy)
		}
		c.rx.Store(rx)
		c.polls.Store(polls)
		c.empty.Store(empty)
	}
}

// xskEchoLoop is xskLoop's echo server: each frame's headers are swapped
// in place and the frame is sent back from the UMEM.
func xskEchoLoop(s *xsk.Socket, c *counters, stop *atomic.Bool) {
	frames := make([][]byte, 64)
	var rx, polls, empty, busy uint64
	for !stop.Load() {
		t0 := time.Now()
		n := s.Rx(frames)
		polls++
		if n == 0 {
			empty++
		}
		for _, f := range frames[:n] {
			if len(f) >= hdrsLen {
				swapForEcho(f)
			}
		}
		if n > 0 {
			s.Echo()
		}
		s.Refill()
		if n > 0 {
			busy += uint64(time.Since(t0))
			c.busyNs.Store(busy)
		}
		rx += uint64(n)
		c.rx.Store(rx)
		c.polls.Store(polls)
		c.empty.Store(empty)
	}
}
