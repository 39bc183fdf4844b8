//go:build linux

package soft

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
	"github.com/seqd/seqd/verbs/soft/internal/xsk"
)

// AF_XDP receive (xdp=DEV): an XDP program on DEV steers the device's
// RoCEv2 packets to one AF_XDP socket per queue, bound to the NIC's
// receive queue of the same index; every other packet goes to the
// kernel. Receive reads the socket's RX ring: no system call, no skb
// (docs/kernel-bypass.md measured 0.37-0.51 x the CPU per packet of
// recvmmsg in copy mode). Transmit stays on the UDP socket with GSO,
// which cost less than AF_XDP's copy-mode transmit there (1.9 x). The
// UDP socket stays open: it sends, and receives what the program passes
// (a packet the NIC put on another queue than its own, IPv4 options).

// Geometry of a queue's AF_XDP socket.
const (
	xdpFrames    = 2048 // UMEM frames (4 KiB each: 8 MiB a queue)
	xdpFrameSize = 4096
	xdpBatch     = 64 // RX descriptors per burst
	// xdpSocketEvery: one burst in this many also reads the UDP socket,
	// for the packets the program passed to the kernel.
	xdpSocketEvery = 64
)

// xdpMode is how the device binds its AF_XDP sockets (xdp_mode=).
type xdpMode uint8

const (
	xdpAuto     xdpMode = iota // zero-copy where the driver offers it, else copy
	xdpCopy                    // copy mode
	xdpZeroCopy                // zero-copy or fail
)

func parseXDPMode(v string) (xdpMode, error) {
	switch v {
	case "auto":
		return xdpAuto, nil
	case "copy":
		return xdpCopy, nil
	case "zerocopy":
		return xdpZeroCopy, nil
	}
	return 0, fmt.Errorf("want auto, copy or zerocopy")
}

// xdpDev is a device's XDP program and what it reports.
type xdpDev struct {
	ifname   string
	ifindex  int
	steer    xsk.Steerer
	attach   xsk.Mode
	zeroCopy bool
	// Frames the parser refused, and the UDP checksums it accepted as a
	// local sender's pseudo-header sum (veth).
	dropNotRoCE, dropLength, dropIPCk, dropUDPCk, dropDst, udpPartial atomic.Uint64
	rxFrames                                                          atomic.Uint64
	// monoOff moves the program's receive times (CLOCK_MONOTONIC) onto
	// verbs.Time.
	monoOff verbs.Time
}

// xdpRx is a queue's AF_XDP socket and the state of its bursts. Used
// under the queue's rxMu.
type xdpRx struct {
	sock   *xsk.Socket
	frames [xdpBatch][]byte
	turn   uint32
	// inFrame: the packet being processed came through the socket, with
	// its IPv4 header at hand: id is its IPv4 ID; verified, that its ICRC
	// was checked already (a packet without DF).
	inFrame  bool
	verified bool
	id       uint16
	// lo and hi bound the arrival of the burst's packets.
	lo, hi verbs.Time
	// ringDrops: the kernel's drops at this socket, as last read.
	ringDrops atomic.Uint64
}

// Capabilities AF_XDP needs (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capSysAdmin = 21
	capBPF      = 39
)

// missingCaps names the capabilities that an effective set eff lacks for
// xdp=: CAP_NET_ADMIN (attach), CAP_BPF (load; CAP_SYS_ADMIN also does)
// and CAP_NET_RAW (the AF_XDP socket).
func missingCaps(eff uint64) []string {
	var miss []string
	if eff&(1<<capNetAdmin) == 0 {
		miss = append(miss, "CAP_NET_ADMIN")
	}
	if eff&(1<<capBPF) == 0 && eff&(1<<capSysAdmin) == 0 {
		miss = append(miss, "CAP_BPF")
	}
	if eff&(1<<capNetRaw) == 0 {
		miss = append(miss, "CAP_NET_RAW")
	}
	return miss
}

// effectiveCaps reads the process's effective capability set.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff in /proc/self/status")
}

// openXDP attaches the steering program to the interface cfg.xdp names,
// in the calling thread's network namespace, and gives every queue an
// AF_XDP socket on the NIC queue of its index. It never falls back to
// the UDP socket alone: an error says what is missing.
func (d *device) openXDP() error {
	name := d.cfg.xdp
	if xsk.AttachPorts == nil {
		return fmt.Errorf("%w: soft: xdp=%s: this binary has no AF_XDP support: it does not import github.com/seqd/seqd/verbs/soft/xdp (seqd does)", verbs.ErrInvalidArgument, name)
	}
	eff, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("soft: xdp=%s: reading capabilities: %w", name, err)
	}
	if miss := missingCaps(eff); len(miss) > 0 {
		return fmt.Errorf("soft: xdp=%s needs root, or CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW: missing %s: %w", name, strings.Join(miss, ", "), unix.EPERM)
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("%w: soft: xdp=%s: %v", verbs.ErrInvalidArgument, name, err)
	}
	if ifi.MTU > xdpFrameSize-256 {
		return fmt.Errorf("%w: soft: xdp=%s: MTU %d is over the %d bytes an AF_XDP frame holds", verbs.ErrInvalidArgument, name, ifi.MTU, xdpFrameSize-256)
	}
	x := &xdpDev{ifname: name, ifindex: ifi.Index}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("soft: xdp=%s: clock: %w", name, err)
	}
	x.monoOff = verbs.Now() - verbs.Time(ts.Nano())
	p := xsk.Ports{Base: d.queues[0].local.Port(), Queues: len(d.queues), Shared: d.shared}
	x.steer, err = xsk.AttachPorts(ifi.Index, p, xsk.Redirect, xsk.Native)
	x.attach = xsk.Native
	if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) {
		var gerr error
		if x.steer, gerr = xsk.AttachPorts(ifi.Index, p, xsk.Redirect, xsk.Generic); gerr == nil {
			d.log.Warn("native XDP refused; running the program in generic (skb) mode, which saves less", "dev", name, "err", err)
			err, x.attach = nil, xsk.Generic
		}
	}
	if err != nil {
		return fmt.Errorf("soft: xdp=%s: %w (another XDP program on the interface? one device per interface)", name, err)
	}
	d.xdp = x
	for _, q := range d.queues {
		c := xsk.SocketConfig{Ifindex: ifi.Index, Queue: q.idx, Frames: xdpFrames, FrameSize: xdpFrameSize,
			TryZeroCopy: d.cfg.xdpMode == xdpAuto, ZeroCopy: d.cfg.xdpMode == xdpZeroCopy}
		s, err := xsk.NewSocket(c)
		if err != nil {
			return fmt.Errorf("soft: xdp=%s: queue %d (the NIC needs a receive queue per provider queue): %w", name, q.idx, err)
		}
		q.xdp, q.xsk = &xdpRx{sock: s}, s
		x.zeroCopy = s.ZeroCopy()
		if err := x.steer.Register(q.idx, s); err != nil {
			return fmt.Errorf("soft: xdp=%s: queue %d: XSKMAP: %w", name, q.idx, err)
		}
	}
	bind := "copy"
	if x.zeroCopy {
		bind = "zerocopy"
	}
	d.log.Info("AF_XDP receive", "dev", name, "xdp", x.attach.String(), "bind", bind, "queues", len(d.queues), "transmit", "udp socket")
	return nil
}

// closeXDP detaches the program (the queues closed their sockets).
func (d *device) closeXDP() {
	if d.xdp != nil && d.xdp.steer != nil {
		d.xdp.steer.Close()
		d.xdp.steer = nil
	}
}

// closeXDP closes q's AF_XDP socket. Callers hold rxMu and txMu.
func (q *queue) closeXDP() {
	if q.xdp != nil && q.xdp.sock != nil {
		q.xdp.sock.Close()
		q.xdp.sock = nil
	}
}

// armXDP and disarmXDP put q's AF_XDP socket in and out of ep with the
// UDP socket (arm, disarm). The progress goroutine calls them: q.xsk is
// set before it starts, and closed (not cleared) after it ends.
func (q *queue) armXDP() error {
	if q.xsk == nil {
		return nil
	}
	fd := q.xsk.FD()
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	return unix.EpollCtl(q.ep, unix.EPOLL_CTL_ADD, fd, &ev)
}

func (q *queue) disarmXDP() {
	if q.xsk != nil {
		unix.EpollCtl(q.ep, unix.EPOLL_CTL_DEL, q.xsk.FD(), nil)
	}
}

// burstXDP receives and processes up to xdpBatch packets from the RX
// ring, without a system call. It reports more when the ring held a full
// batch; socket when this burst is the one in xdpSocketEvery that reads
// the UDP socket instead (burst goes on to it). Callers hold rxMu.
func (q *queue) burstXDP() (more, socket bool) {
	x := q.xdp
	if x.turn++; x.turn%xdpSocketEvery == 0 || x.sock == nil {
		return false, true
	}
	if q.closed.Load() {
		return false, false
	}
	start := verbs.Now()
	n := x.sock.Rx(x.frames[:])
	if n == 0 {
		q.rxEmpty = start
		return false, false
	}
	// Every packet of the batch arrived after the last read that found
	// the ring empty, and before now: the program's receive time, where
	// it falls in between, says when (else the earlier bound stands).
	x.lo, x.hi = q.rxEmpty, verbs.Now()
	if n < xdpBatch {
		q.rxEmpty = start // a batch that did not fill took the ring empty
	}
	q.io.rxDatagrams.Add(uint64(n))
	q.d.xdp.rxFrames.Add(uint64(n))
	pkts := 0
	off := q.d.xdp.monoOff
	for _, f := range x.frames[:n] {
		q.rxArrived = x.lo
		if ts := x.sock.RxTime(f); ts != 0 {
			if t := verbs.Time(ts) + off; t >= x.lo && t <= x.hi {
				q.rxArrived = t
			}
		}
		pkts += q.frame(f)
	}
	x.inFrame = false
	q.io.rxPackets.Add(uint64(pkts))
	q.afterBurst()
	x.sock.Refill()
	return n == xdpBatch, false
}

// frame processes one received Ethernet frame and returns the number of
// transport packets in it (0 or 1). Callers hold rxMu.
func (q *queue) frame(f []byte) int {
	x, dx := q.xdp, q.d.xdp
	var h frameHdr
	pkt, e := parseFrame(f, &h)
	switch e {
	case frameOK:
	case frameNotRoCE:
		dx.dropNotRoCE.Add(1)
		return 0
	case frameLength:
		dx.dropLength.Add(1)
		return 0
	case frameIPChecksum:
		dx.dropIPCk.Add(1)
		return 0
	default:
		dx.dropUDPCk.Add(1)
		return 0
	}
	if h.udpPartial {
		dx.udpPartial.Add(1)
	}
	if h.dport != q.local.Port() || !q.wildcard && h.dst != q.ip {
		// Not this socket's (the program steers by port alone).
		dx.dropDst.Add(1)
		return 0
	}
	if len(pkt) < rocev2.BTHLen+rocev2.ICRCLen {
		q.d.ctr.dropMalformed.Add(1)
		return 0
	}
	q.rxDst = h.dst
	x.inFrame, x.verified, x.id = true, false, h.id
	if h.flagsFrag != 0x4000 {
		// No DF: the prefixes are for DF packets; check this one whole.
		fl := rocev2.Flow{Src: h.src, Dst: h.dst, SrcPort: h.sport, DstPort: h.dport, ID: h.id, FlagsFrag: h.flagsFrag}
		if !rocev2.VerifyICRC(&fl, pkt) {
			q.d.ctr.dropICRC.Add(1)
			return 0
		}
		x.verified = true
	}
	return q.datagram(pkt, len(pkt), h.src, h.sport)
}

// icrcOK is queue.icrcOK for a packet from the AF_XDP socket: the IPv4
// ID is the header's, not searched for.
func (x *xdpRx) icrcOK(q *queue, c *rxFlow, sum0, got uint32) bool {
	if x.verified {
		return true
	}
	if x.id != 0 && c.ids.Len() != c.n {
		c.ids.Set(c.n)
		c.nextID, c.nextTerm = 0, 0
	}
	if !frameICRCOK(&c.ids, &c.nextID, &c.nextTerm, sum0, got, x.id) {
		q.d.ctr.dropICRC.Add(1)
		return false
	}
	return true
}

// visitXDP reports the AF_XDP path's counters: which bind mode is in
// use (xdp_zerocopy 1 or 0), the frames the parser refused, and the
// kernel's drops at the sockets' RX rings.
func (d *device) visitXDP(f func(string, uint64)) {
	x := d.xdp
	if x == nil {
		return
	}
	zc := uint64(0)
	if x.zeroCopy {
		zc = 1
	}
	f("xdp_zerocopy", zc)
	f("xdp_rx_frames", x.rxFrames.Load())
	f("xdp_drop_not_roce", x.dropNotRoCE.Load())
	f("xdp_drop_length", x.dropLength.Load())
	f("xdp_drop_ip_checksum", x.dropIPCk.Load())
	f("xdp_drop_udp_checksum", x.dropUDPCk.Load())
	f("xdp_drop_dst", x.dropDst.Load())
	f("xdp_udp_checksum_partial", x.udpPartial.Load())
	var ringDrops uint64
	for _, q := range d.queues {
		if q.xdp == nil {
			continue
		}
		// A scrape does not wait for a flood's bursts: while one holds
		// rxMu, the last value read stands.
		if q.rxMu.TryLock() {
			if s := q.xdp.sock; s != nil {
				if st, err := s.Stats(); err == nil {
					q.xdp.ringDrops.Store(st.Rx_dropped + st.Rx_ring_full + st.Rx_invalid_descs)
				}
			}
			q.rxMu.Unlock()
		}
		ringDrops += q.xdp.ringDrops.Load()
	}
	f("xdp_kernel_rx_dropped", ringDrops)
}
