package soft

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
	"github.com/seqd/seqd/verbs/soft/internal/xsk"
)

// Batch geometry.
const (
	rxMsgs      = 8        // messages per recvmmsg
	rxBufLen    = 64 << 10 // one GRO super-packet
	txArenaLen  = 1 << 20  // bytes encoded before a doorbell must flush
	txMaxPkts   = 2048     // packets encoded before a doorbell must flush
	gsoMaxSegs  = 64       // UDP_MAX_SEGMENTS on older kernels
	gsoMaxBytes = 65000    // stay under the 64 KiB UDP datagram limit
	cmsgSpace   = 24       // CMSG_SPACE(sizeof(int)) on 64-bit Linux
	rxCtrlLen   = 128      // UDP_GRO, IP_PKTINFO and SO_TIMESTAMPNS control messages
	tickPeriod  = time.Millisecond
	// idlePeriod: how often the progress goroutine of a queue with no
	// timer work looks whether its CQ pollers stopped without a CQ.Wait
	// (one that waits kicks it). Each look wakes a thread, and on a
	// machine whose cores all spin, that thread preempts a poller.
	idlePeriod = 20 * time.Millisecond
)

// staleEmpty is how old the last read that found the socket empty may be
// before a burst asks the kernel for receive times (setStamps).
const staleEmpty = 200 * time.Microsecond

// arrivedWithin is the device's verbs.DeviceAttr.ArrivedWithin when
// every queue's socket takes SO_TIMESTAMPNS: a datagram is stamped with
// the kernel's receive time, or with the start of a read that found the
// socket empty at most staleEmpty before the read that took it began;
// the rest is margin for the read itself.
const arrivedWithin = 2 * staleEmpty

// peer is a destination as one queue sends to it: the socket address and
// the ICRC flow, with the ICRC prefix of the last packet size cached.
// A peer is used only under its queue's transmit lock.
type peer struct {
	sa     unix.RawSockaddrInet4
	flow   rocev2.Flow
	preLen int
	pre    uint32
	icrc   rocev2.Patcher // consecutive packets differ in a few bytes
	udimm  rocev2.UDImmICRC
	// ids moves an ICRC to the IPv4 ID a GSO segment will carry, for the
	// two packet lengths of a run (full segments and a shorter last one).
	ids [2]rocev2.IDTerms
	// roce: the peer listens on the RoCEv2 port, where a NIC or a soft
	// device whose queues share the port may steer each packet to a
	// queue by its destination QP; a GSO run then holds one QP's packets.
	roce bool
}

func (q *queue) newPeer(a verbs.Address) (*peer, error) {
	ip := a.GID.Addr()
	if !ip.Is4() {
		return nil, fmt.Errorf("%w: soft provider reaches IPv4 addresses, not %v", verbs.ErrInvalidArgument, a)
	}
	port := a.RoCEPort()
	pe := &peer{sa: unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ip.As4()}, roce: port == verbs.RoCEv2Port}
	pe.sa.Port = htons(port)
	pe.flow = rocev2.Flow{Src: q.ip, Dst: ip.As4(), SrcPort: q.local.Port(), DstPort: port, FlagsFrag: 0x4000}
	if q.nicwire {
		pe.flow.SrcPort = nicSourcePort()
	}
	pe.preLen = -1
	return pe, nil
}

// idTerm returns what IPv4 ID id adds to the ICRC of an n-byte packet to
// pe.
func (pe *peer) idTerm(n int, id uint16) uint32 {
	t := &pe.ids[0]
	if t.Len() != n {
		pe.ids[0], pe.ids[1] = pe.ids[1], pe.ids[0]
		if t.Len() != n {
			t.Set(n)
		}
	}
	return t.Term(id)
}

func (pe *peer) prefix(n int) uint32 {
	if pe.preLen != n {
		pe.pre, pe.preLen = pe.flow.Prefix(n), n
	}
	return pe.pre
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

type txPkt struct {
	pe  *peer
	off int32
	n   int32
	id  uint16 // the IPv4 ID its ICRC is computed for
	// wr is 1 + the index, in the chain being posted, of the UD send it
	// carries, when that has a deadline (0: none); dl is the deadline
	// (verbs.SendWR.Deadline, 0: none).
	wr int32
	dl verbs.Time
}

// stampID makes the ICRC of p right for IPv4 ID id.
func (q *queue) stampID(p *txPkt, id uint16) {
	if p.id == id {
		return
	}
	b := q.arena[p.off : p.off+p.n]
	c := b[len(b)-rocev2.ICRCLen:]
	binaryLE32(c, le32(c)^p.pe.idTerm(len(b), p.id^id))
	p.id = id
}

// destQP returns the destination QPN of packet p.
func (q *queue) destQP(p *txPkt) uint32 {
	b := q.arena[p.off+5 : p.off+8]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

// queue is one UDP socket with its transmit arena and receive rings.
type queue struct {
	d     *device
	idx   int
	local netip.AddrPort // the advertised address: what peers send to
	ip    [4]byte        // local.Addr(), for the ICRC
	// wildcard: the socket is bound to 0.0.0.0; each datagram's
	// destination address comes from IP_PKTINFO.
	wildcard bool
	// fd is the socket, non-blocking, and never in Go's netpoller: the
	// netpoller registers descriptors edge-triggered for input and output,
	// so every datagram received, and every one sent (the kernel signals
	// write space as it frees the buffer), would wake a thread parked in
	// epoll_wait, even while CQ pollers move the packets themselves. (A
	// serial client measured a wake-up per round trip on each side, and a
	// tail of 100 µs and more.) The progress goroutine waits instead on ep,
	// an epoll instance of its own that holds the socket for input only,
	// and only while the goroutine is the queue's receiver (arm): when
	// pollers come back, the first datagram they take wakes it once, and it
	// takes the socket out. ep, not the socket, is in the netpoller (epf).
	fd    int
	ep    int
	epf   *os.File
	armed bool // the socket is in ep; progress goroutine only
	// nicwire: packets leave through raw, an IP_HDRINCL socket
	// (nicwire.go).
	nicwire bool
	raw     int
	rawHdr  []byte       // txMaxPkts IPv4+UDP headers
	rawIov  []unix.Iovec // two per packet: header, transport packet
	nextID  uint16       // the IPv4 ID of the next packet (never 0)

	// Transmit state, under txMu.
	txMu   sync.Mutex
	arena  []byte
	used   int
	pkts   []txPkt
	hdrs   []unix.Mmsghdr
	iovs   []unix.Iovec
	ctrl   []byte
	hdrPkt []int // first packet of each message
	nhdr   int
	sent   int
	// dlMin is the earliest deadline of the packets recorded and not
	// sent yet (0: none has one); late collects, for the PostSend that
	// recorded them, the wr of the packets dropped for their deadline.
	dlMin   verbs.Time
	late    []int32
	txErrno syscall.Errno
	gso     bool
	rng     *rand.Rand
	held    []byte
	heldPkt []txPkt

	// Receive state, under rxMu.
	rxMu    sync.Mutex
	rbufs   [rxMsgs][]byte
	rhdrs   [rxMsgs]unix.Mmsghdr
	riovs   [rxMsgs]unix.Iovec
	rnames  [rxMsgs]unix.RawSockaddrInet4
	rctrl   [rxMsgs][rxCtrlLen]byte
	rxErrno syscall.Errno
	rxDirty int     // headers the last recvmmsg filled
	rxDst   [4]byte // destination address of the datagram being processed
	// rxArrived stamps the datagram being processed (verbs.WC.Arrived):
	// the kernel's receive time (SO_TIMESTAMPNS), moved onto the
	// monotonic clock, where the datagram carries one, and rxEmpty
	// otherwise.
	rxArrived verbs.Time
	// rxEmpty is when the last recvmmsg known to have found the socket
	// empty began: every datagram read after it arrived later, so it
	// bounds their arrival from below (their age is over-, never
	// under-estimated). It starts as the socket's creation. rxShort is
	// the start of a recvmmsg that returned fewer messages than asked
	// for: the socket ran dry then, unless the kernel cut the batch short
	// on an error, which it reports on the next call; that call commits
	// it to rxEmpty. 0: none pending.
	rxEmpty verbs.Time
	rxShort verbs.Time
	stale   time.Duration // staleEmpty (tests change it under rxMu)
	// stamps: the socket delivers kernel receive times (SO_TIMESTAMPNS);
	// see setStamps.
	stamps bool
	// canStamp: the socket took SO_TIMESTAMPNS at its creation.
	canStamp bool
	rxPre    rxFlow
	rxTab    rocev2.PrefixTable // rxPre's prefixes for the sequencer's packets
	readFn   func(uintptr) bool
	rqHeld   *qp // the QP whose receive queue the burst holds locked
	pendCQ   *cq // receive completions batched for one CQ
	pend     [64]verbs.WC
	npend    int
	// direct is the CQ whose poller drives this burst (pollInto), while
	// its ring is empty: its receive completions go straight into the
	// poller's slice, dwc (nd of them so far), instead of through pend
	// and the ring (a lock and two copies each way fewer on a serial
	// round trip); once dwc is full, through pend as the others.
	direct  *cq
	dwc     []verbs.WC
	nd      int
	acks    []*qp // RC QPs with an ACK to send after this burst
	rcPeers map[*qp]struct{}
	nrc     atomic.Int32 // len(rcPeers), readable without rxMu
	nheld   atomic.Int32 // len(heldPkt), readable without txMu

	io ioCounts // its share of the device's counters

	xdp *xdpRx      // the AF_XDP receive path (xdp=), or nil; under rxMu
	xsk *xsk.Socket // xdp's socket, for the progress goroutine's epoll

	active  atomic.Int32  // RC QPs with work in flight (need ticks)
	polls   atomic.Uint64 // inline receive bursts run by CQ pollers
	seen    uint64        // polls, as the progress goroutine last saw it
	waiters atomic.Int32  // CQ.Wait callers on CQs of this queue
	kick    chan struct{}
	closed  atomic.Bool
	started bool // start ran (before any close)
	done    chan struct{}
}

func newQueue(d *device, idx int, local netip.AddrPort) (*queue, error) {
	lc := net.ListenConfig{}
	if d.shared {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
			return errors.Join(err, serr)
		}
	}
	pc, err := lc.ListenPacket(context.Background(), "udp4", local.String())
	if err != nil {
		return nil, fmt.Errorf("soft: queue %d: %w", idx, err)
	}
	conn := pc.(*net.UDPConn)
	// Keep a duplicate of the socket and close the net.UDPConn: closing
	// it removes the socket from the netpoller, the duplicate keeps it
	// open (non-blocking, as ListenUDP made it).
	q := &queue{d: d, idx: idx, fd: -1, ep: -1, raw: -1, gso: d.cfg.gso, done: make(chan struct{}), kick: make(chan struct{}, 1),
		rng: rand.New(rand.NewPCG(d.cfg.seed, uint64(idx)))}
	bound := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	rc, err := conn.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { q.fd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
		err = errors.Join(err, cerr)
	}
	conn.Close()
	if err != nil {
		if q.fd >= 0 {
			unix.Close(q.fd)
		}
		return nil, fmt.Errorf("soft: queue %d: %w", idx, err)
	}
	q.local = netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port())
	if q.local.Addr().IsUnspecified() {
		q.wildcard = true
		q.local = netip.AddrPortFrom(d.cfg.advertise, bound.Port())
	}
	q.ip = q.local.Addr().As4()
	serr := errors.Join(
		unix.SetsockoptInt(q.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO),
		setBuf(q.fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, d.cfg.rcvbuf),
		setBuf(q.fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, d.cfg.sndbuf),
	)
	if d.cfg.tos != 0 {
		serr = errors.Join(serr, unix.SetsockoptInt(q.fd, unix.IPPROTO_IP, unix.IP_TOS, d.cfg.tos))
	}
	if q.wildcard {
		serr = errors.Join(serr, unix.SetsockoptInt(q.fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1))
	}
	// Receive timestamps: a request's age (spec.MaxResidence) counts from
	// when the kernel took the datagram, not from when a poller read it
	// out of the socket buffer. Turning them on here also makes the kernel
	// stamp every datagram as it arrives, for as long as the socket
	// lives; turning them off later (setStamps) only stops their delivery,
	// which costs a control message per datagram received.
	q.rxEmpty, q.stale = verbs.Now(), staleEmpty
	if e := unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); e != nil {
		d.log.Warn("SO_TIMESTAMPNS refused; a datagram read long after the socket was last found empty is stamped with that read, which overstates its age (a request may be dropped as expired)", "queue", idx, "err", e)
	} else {
		q.stamps, q.canStamp = true, true
	}
	if d.cfg.gro && d.shared {
		// GRO merges a flow's packets whatever their destination QP, and
		// the merged datagram reaches the queue of the first one only.
		if idx == 0 {
			d.log.Info("UDP GRO off: the queues share the RoCEv2 port")
		}
	} else if d.cfg.gro {
		if e := unix.SetsockoptInt(q.fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); e != nil {
			d.log.Warn("UDP_GRO refused; receiving one datagram per packet", "queue", idx, "err", e)
		}
	}
	if serr != nil {
		unix.Close(q.fd)
		return nil, fmt.Errorf("soft: queue %d socket options: %w", idx, serr)
	}
	if err := q.openEpoll(); err != nil {
		unix.Close(q.fd)
		return nil, fmt.Errorf("soft: queue %d: %w", idx, err)
	}
	if d.cfg.nicwire {
		if err := q.openRaw(); err != nil {
			unix.Close(q.fd)
			q.epf.Close()
			return nil, fmt.Errorf("soft: queue %d: nicwire: %w", idx, err)
		}
	}
	q.arena = make([]byte, txArenaLen)
	q.pkts = make([]txPkt, 0, txMaxPkts)
	q.hdrs = make([]unix.Mmsghdr, txMaxPkts)
	q.iovs = make([]unix.Iovec, txMaxPkts)
	q.ctrl = make([]byte, txMaxPkts*cmsgSpace)
	q.hdrPkt = make([]int, txMaxPkts)
	q.held = make([]byte, 0, 64<<10)
	for i := range q.rbufs {
		q.rbufs[i] = make([]byte, rxBufLen)
		q.riovs[i] = unix.Iovec{Base: &q.rbufs[i][0]}
		q.riovs[i].SetLen(rxBufLen)
		h := &q.rhdrs[i].Hdr
		h.Iov = &q.riovs[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&q.rnames[i]))
		h.Control = &q.rctrl[i][0]
	}
	q.rxDirty = rxMsgs // the first burst sets every header
	q.rcPeers = map[*qp]struct{}{}
	return q, nil
}

func (q *queue) start() {
	q.started = true
	go q.run()
}

// close stops the progress goroutine, then closes the socket once no
// burst or doorbell can be using it (both run under the queue's locks and
// look at closed first).
func (q *queue) close() {
	if q.closed.Swap(true) {
		return
	}
	q.kickRead()
	if q.started {
		select {
		case <-q.done:
		case <-time.After(5 * time.Second):
			// Never close a descriptor a live goroutine may still use:
			// its number could be reused. Leak it instead.
			q.d.log.Error("soft: progress goroutine did not stop; leaving its socket open", "queue", q.idx)
			return
		}
	}
	q.rxMu.Lock()
	q.txMu.Lock()
	unix.Close(q.fd)
	q.epf.Close()
	q.closeXDP()
	if q.nicwire {
		unix.Close(q.raw)
	}
	q.txMu.Unlock()
	q.rxMu.Unlock()
}

// ---- transmit ----

// reserve returns n bytes of arena for a packet, flushing first if the
// arena is full. Callers hold txMu and then call record.
func (q *queue) reserve(n int) []byte {
	if q.used+n > len(q.arena) || len(q.pkts) == cap(q.pkts) {
		q.flush()
	}
	return q.arena[q.used : q.used+n : q.used+n]
}

// putICRC writes the ICRC of the packet encoded in b, for pe.
func (q *queue) putICRC(pe *peer, b []byte) {
	n := len(b)
	binaryLE32(b[n-rocev2.ICRCLen:], pe.icrc.ICRC(pe.prefix(n), b))
}

// record queues the packet just encoded in the reserved bytes b (ICRC
// included) for the next doorbell, or applies injected faults.
func (q *queue) record(pe *peer, b []byte) {
	n := len(b)
	cfg := &q.d.cfg
	if cfg.loss > 0 && q.rng.Float64() < cfg.loss {
		q.d.ctr.faultLoss.Add(1)
		return
	}
	if cfg.reorder > 0 && q.rng.Float64() < cfg.reorder && len(q.held)+n <= cap(q.held) {
		q.d.ctr.faultReorder.Add(1)
		q.heldPkt = append(q.heldPkt, txPkt{pe: pe, off: int32(len(q.held)), n: int32(n)})
		// Publish the work before the kick: the progress goroutine
		// re-checks needTicks after clearing its deadline.
		q.nheld.Store(int32(len(q.heldPkt)))
		if len(q.heldPkt) == 1 {
			q.kickRead()
		}
		q.held = append(q.held, b...)
		return
	}
	q.pkts = append(q.pkts, txPkt{pe: pe, off: int32(q.used), n: int32(n)})
	q.used += n
	if cfg.dup > 0 && q.rng.Float64() < cfg.dup && len(q.pkts) < cap(q.pkts) && q.used+n <= len(q.arena) {
		q.d.ctr.faultDup.Add(1)
		copy(q.arena[q.used:], b)
		q.pkts = append(q.pkts, txPkt{pe: pe, off: int32(q.used), n: int32(n)})
		q.used += n
	}
}

// releaseHeld appends packets held back by reorder injection after the
// ones already queued, so they leave late. Callers hold txMu.
func (q *queue) releaseHeld() {
	if len(q.heldPkt) == 0 {
		return
	}
	for _, h := range q.heldPkt {
		if q.used+int(h.n) > len(q.arena) || len(q.pkts) == cap(q.pkts) {
			break
		}
		copy(q.arena[q.used:], q.held[h.off:h.off+h.n])
		q.pkts = append(q.pkts, txPkt{pe: h.pe, off: int32(q.used), n: h.n})
		q.used += int(h.n)
	}
	q.held, q.heldPkt = q.held[:0], q.heldPkt[:0]
	q.nheld.Store(0)
}

// doorbell is PostSend's flush: deferred while a HoldDoorbell is open
// (reserve still flushes when the arena fills), unless a packet has a
// deadline: those leave, or are dropped, within the PostSend that
// recorded them. Callers hold txMu.
func (q *queue) doorbell() {
	if q.d.holds.Load() == 0 || q.dlMin != 0 {
		q.flush()
	}
}

// flush rings the doorbell: every recorded packet leaves in one sendmmsg
// (more only if the socket buffer is full), with runs of equal-size
// packets to one peer coalesced into UDP GSO messages. Callers hold txMu.
func (q *queue) flush() {
	if len(q.pkts) == 0 {
		return
	}
	if q.closed.Load() {
		q.pkts = q.pkts[:0]
		q.used = 0
		q.dlMin = 0
		return
	}
	q.build(0)
	q.sent = 0
	for q.sent < q.nhdr {
		q.txErrno = 0
		if !q.write() {
			// The socket buffer is full: wait until it drains, as a full
			// send queue holds up a NIC's doorbell.
			if q.closed.Load() {
				break
			}
			q.waitWritable()
			continue
		}
		if q.txErrno == unix.EIO && q.gso {
			// The kernel refused GSO: fall back to one datagram per packet.
			q.gso = false
			q.d.ctr.gsoFallback.Add(1)
			q.d.log.Warn("UDP GSO refused by the kernel (EIO); sending one datagram per packet", "queue", q.idx)
			q.build(q.hdrPkt[q.sent])
			q.sent = 0
			continue
		}
		if q.txErrno != 0 {
			// The message at q.sent cannot be sent (for example
			// EMSGSIZE): it is lost, as on a network; go on.
			q.sent++
		}
	}
	q.io.txPackets += uint64(len(q.pkts))
	q.pkts = q.pkts[:0]
	q.used = 0
	q.dlMin = 0
}

// dropLate drops the packets not sent yet whose deadline is before now
// (noting their work requests in late), and rebuilds the messages of
// the others. Callers hold txMu, with messages left to send.
func (q *queue) dropLate(now verbs.Time) {
	from := q.hdrPkt[q.sent]
	keep := from
	q.dlMin = 0
	for i := from; i < len(q.pkts); i++ {
		p := q.pkts[i]
		if p.dl != 0 && now > p.dl {
			q.d.ctr.dropDeadline.Add(1)
			if p.wr != 0 {
				q.late = append(q.late, p.wr-1)
			}
			continue
		}
		if p.dl != 0 && (q.dlMin == 0 || p.dl < q.dlMin) {
			q.dlMin = p.dl
		}
		q.pkts[keep] = p
		keep++
	}
	q.pkts = q.pkts[:keep]
	q.build(from)
	q.sent = 0
}

// build fills the message headers for pkts[from:]. The kernel sends a
// socket's DF datagram with IPv4 ID 0, and where it (or the NIC) cuts a
// GSO message into segments it numbers them 0, 1, 2... (inet_gso_segment):
// segment k's ICRC is computed for ID k.
func (q *queue) build(from int) {
	if q.nicwire {
		q.buildRaw(from)
		return
	}
	q.nhdr = 0
	pkts := q.pkts
	for i := from; i < len(pkts); {
		p := pkts[i]
		j := i + 1
		total := int(p.n)
		if q.gso {
			// A GSO run: same peer, same size, contiguous, except that the
			// last segment may be shorter.
			for j < len(pkts) && j-i < gsoMaxSegs && pkts[j].pe == p.pe &&
				pkts[j].off == p.off+int32(total) && pkts[j].n <= p.n && total+int(pkts[j].n) <= gsoMaxBytes &&
				(!p.pe.roce || q.destQP(&pkts[j]) == q.destQP(&pkts[i])) {
				total += int(pkts[j].n)
				j++
				if pkts[j-1].n < p.n {
					break
				}
			}
		}
		for s := i; s < j; s++ {
			q.stampID(&pkts[s], uint16(s-i))
		}
		k := q.nhdr
		q.iovs[k] = unix.Iovec{Base: &q.arena[p.off]}
		q.iovs[k].SetLen(total)
		h := &q.hdrs[k].Hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&p.pe.sa)), Namelen: unix.SizeofSockaddrInet4, Iov: &q.iovs[k]}
		h.SetIovlen(1)
		if j-i > 1 {
			c := q.ctrl[k*cmsgSpace : (k+1)*cmsgSpace]
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			cm.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(p.n)
			h.Control = &c[0]
			h.SetControllen(unix.CmsgSpace(2))
		}
		q.hdrPkt[k] = i
		q.nhdr++
		i = j
	}
}

// sendmmsg is the system call, a variable so that tests can make the
// kernel refuse GSO.
//
// Both data-path system calls are raw: the socket is non-blocking (a full
// send buffer is EAGAIN, and the caller then waits in the netpoller), so
// neither can block, and skipping the scheduler's entersyscall and
// exitsyscall keeps sysmon from handing a busy-polling thread's P to
// another goroutine in the middle of a batch. Measured on the echo
// benchmarks, this is worth 5-20%; verbs/echo's raw-UDP reference does the
// same, so the comparison stays like for like.
var sendmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
	return int(n), errno
}

// waitWritable waits up to a millisecond for room in the socket buffer.
// It yields first: the buffer drains as the kernel delivers, which takes
// microseconds on loopback.
func (q *queue) waitWritable() {
	for range 64 {
		runtime.Gosched()
		if q.writable(0) {
			return
		}
	}
	q.writable(1)
}

func (q *queue) writable(ms int) bool {
	fds := [1]unix.PollFd{{Fd: int32(q.txFD()), Events: unix.POLLOUT}}
	n, _ := unix.Poll(fds[:], ms)
	return n > 0
}

// write sends hdrs[sent:nhdr]; it reports false when the socket buffer is
// full (EAGAIN). Callers hold txMu.
func (q *queue) write() bool {
	fd := uintptr(q.txFD())
	for q.sent < q.nhdr {
		// The deadline check is the last thing before the system call:
		// nothing that waits (for socket room, for the scheduler) comes
		// between it and the packets leaving but the call itself.
		if q.dlMin != 0 {
			if now := verbs.Now(); now > q.dlMin {
				q.dropLate(now)
				continue
			}
		}
		n, errno := sendmmsg(fd, q.hdrs[q.sent:q.nhdr])
		q.io.txSyscalls++
		if errno == unix.EAGAIN {
			return false
		}
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			q.txErrno = errno
			return true
		}
		q.sent += int(n)
		q.io.txDatagrams += uint64(n)
	}
	return true
}

// ---- receive ----

// pendWC returns the next receive completion for c, to be filled in; the
// burst hands them to the CQ in batches (one lock per batch, not per
// packet). Callers hold rxMu.
func (q *queue) pendWC(c *cq) *verbs.WC {
	if c == q.direct && q.nd < len(q.dwc) {
		w := &q.dwc[q.nd]
		q.nd++
		return w
	}
	if c != q.pendCQ || q.npend == len(q.pend) {
		q.flushPend()
		q.pendCQ = c
	}
	w := &q.pend[q.npend]
	q.npend++
	return w
}

// flushPend hands batched completions to their CQ. Callers hold rxMu.
func (q *queue) flushPend() {
	if q.npend > 0 {
		q.pendCQ.pushN(q.pend[:q.npend])
		q.npend = 0
	}
}

// burst receives and processes one recvmmsg batch without blocking. It
// returns false once the socket is drained. Callers hold rxMu.
func (q *queue) burst() bool {
	if q.xdp != nil {
		if more, socket := q.burstXDP(); !socket {
			return more
		}
	}
	// The kernel writes back name and control lengths and flags only for
	// the messages it fills: reset those (an empty poll resets nothing).
	for i := range q.rxDirty {
		h := &q.rhdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet4
		h.SetControllen(rxCtrlLen)
		h.Flags = 0
	}
	q.rxDirty = 0
	if q.closed.Load() {
		return false
	}
	start := verbs.Now()
	if !q.stamps && start.Sub(q.rxEmpty) > q.stale {
		q.setStamps(true)
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(q.fd), uintptr(unsafe.Pointer(&q.rhdrs[0])), rxMsgs, unix.MSG_DONTWAIT, 0, 0)
	q.io.rxSyscalls.Add(1)
	if errno == 0 || errno == unix.EAGAIN {
		if q.rxShort != 0 {
			q.rxEmpty = q.rxShort // the short batch before ran the socket dry
		}
	}
	q.rxShort = 0
	if errno != 0 {
		if errno == unix.EAGAIN {
			q.rxEmpty = start
			if q.stamps {
				q.setStamps(false)
			}
		}
		q.rxErrno = errno
		return errno == unix.EINTR
	}
	q.rxDirty = int(n)
	q.io.rxDatagrams.Add(uint64(n))
	empty := q.rxEmpty // these datagrams arrived after it
	if n < rxMsgs {
		q.rxShort = start
	}
	// Kernel stamps are wall-clock times, moved onto the monotonic clock
	// through one reading of both, taken at the first stamp of the burst.
	var mono verbs.Time
	var wall int64
	pkts := 0
	for i := 0; i < int(n); i++ {
		h := &q.rhdrs[i]
		total := int(h.Len)
		seg := total
		gso, dst, haveDst, stamp := parseCmsgs(q.rctrl[i][:min(int(h.Hdr.Controllen), rxCtrlLen)])
		if gso > 0 {
			seg = gso
		}
		q.rxArrived = empty
		if stamp != 0 {
			if wall == 0 {
				now := time.Now()
				mono, wall = verbs.TimeOf(now), now.UnixNano()
			}
			q.rxArrived = arrival(mono, wall, stamp, empty)
		}
		q.rxDst = q.ip
		if q.wildcard {
			if !haveDst {
				q.d.ctr.dropMalformed.Add(1)
				continue
			}
			q.rxDst = dst
		}
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 || total == 0 {
			// Truncated, or an empty datagram: no transport packet at all.
			q.d.ctr.dropMalformed.Add(1)
			continue
		}
		sa := &q.rnames[i]
		pkts += q.datagram(q.rbufs[i][:total], seg, sa.Addr, htons(sa.Port))
	}
	q.io.rxPackets.Add(uint64(pkts))
	q.afterBurst()
	return int(n) == rxMsgs
}

// datagram processes one received datagram from src:sport: a GRO
// super-packet of seg-byte segments (the last may be shorter), or one
// packet when seg is its length. It returns the number of packets.
// Callers hold rxMu and set rxDst.
func (q *queue) datagram(buf []byte, seg int, src [4]byte, sport uint16) int {
	if seg == rocev2.UDImmLen {
		// A run of the sequencer's packets (a GRO super-packet, or one).
		return q.inputUDImmRun(buf, src, sport)
	}
	n := 0
	for off := 0; off < len(buf); off += seg {
		q.input(buf[off:min(off+seg, len(buf))], src, sport)
		n++
	}
	return n
}

// drain runs bursts until the socket is empty (or a bounded number, so
// that an inline poller returns to its caller).
func (q *queue) drain(max int) {
	for i := 0; i < max && q.burst(); i++ {
	}
}

// pollersActive reports whether CQ pollers have driven this queue since
// the progress goroutine last looked, with nobody blocked in CQ.Wait.
func (q *queue) pollersActive() bool {
	return q.waiters.Load() == 0 && q.polls.Load() != q.seen
}

// pollInto is the inline progress a poller of c runs: it returns how
// many of c's completions it put straight into wc (see direct). That
// keeps c's completions in order only while c's ring holds none of this
// queue's receives, which are made under rxMu alone: so only then.
func (q *queue) pollInto(c *cq, wc []verbs.WC) int {
	q.polls.Add(1)
	if !q.rxMu.TryLock() {
		return 0
	}
	if !c.has.Load() {
		q.direct, q.dwc = c, wc
	}
	q.drain(4)
	n := q.nd
	q.direct, q.dwc, q.nd = nil, nil, 0
	q.rxMu.Unlock()
	return n
}

// wake makes the progress goroutine take over receiving now (a CQ.Wait
// caller is about to block).
func (q *queue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// run is the queue's progress goroutine. While CQ pollers are active it
// sleeps (a tick at a time while timers need it), and takes over
// receiving when a CQ.Wait caller kicks it, or when it finds that nobody
// polled since it last looked. Then it arms the socket in ep and waits in
// the netpoller (for a tick at most while timers need it), and drains the
// socket unless pollers came back meanwhile.
func (q *queue) run() {
	defer close(q.done)
	sleep := time.NewTimer(tickPeriod)
	rc, err := q.epf.SyscallConn()
	if err != nil {
		q.d.log.Error("soft: progress: no receive progress", "queue", q.idx, "err", err)
		return
	}
	for !q.closed.Load() {
		if q.pollersActive() {
			q.disarm()
			q.seen = q.polls.Load()
			period := idlePeriod
			if q.needTicks() || q.nrc.Load() > 0 {
				period = tickPeriod
			}
			sleep.Reset(period)
			select {
			case <-sleep.C:
			case <-q.kick:
				sleep.Stop()
			}
			q.tick(time.Now())
			continue
		}
		// Set the deadline on every pass: a kickRead may have left one in
		// the past, and a past deadline makes Read return at once.
		if q.needTicks() {
			q.epf.SetReadDeadline(time.Now().Add(tickPeriod))
		} else {
			q.epf.SetReadDeadline(time.Time{})
			// Timer work that appeared before the deadline was cleared
			// would otherwise wait for the next packet; kickRead covers
			// what appears after.
			if q.needTicks() {
				continue
			}
		}
		if q.closed.Load() {
			return // a kick before the deadline was cleared found nothing to end
		}
		err := q.arm()
		if err == nil {
			err = rc.Read(q.readFn)
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !q.closed.Load() {
			q.d.log.Error("soft: progress: waiting for the socket", "queue", q.idx, "err", err)
			time.Sleep(tickPeriod)
		}
		if !q.pollersActive() {
			q.rxMu.Lock()
			q.drain(1 << 30)
			q.rxMu.Unlock()
		}
		q.tick(time.Now())
	}
}

// openEpoll makes ep (empty) and epf.
func (q *queue) openEpoll() error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return fmt.Errorf("epoll: %w", err)
	}
	q.ep = ep
	q.epf = os.NewFile(uintptr(ep), "soft-queue-progress") // non-blocking: it joins the netpoller
	q.readFn = q.readReady
	return nil
}

// arm puts the socket in ep, for input, unless it is there: it stays
// while the progress goroutine is the queue's receiver (a worker that
// polls memory, as herd's does, leaves every datagram to it) and leaves
// when pollers come back. The socket is in ep only then: an entry on the
// socket's wait queue costs every datagram the queue receives a locked
// walk of that queue (about 5 % of a serial server's samples).
func (q *queue) arm() error {
	if q.armed {
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(q.fd)}
	if err := unix.EpollCtl(q.ep, unix.EPOLL_CTL_ADD, q.fd, &ev); err != nil {
		return err
	}
	if err := q.armXDP(); err != nil {
		unix.EpollCtl(q.ep, unix.EPOLL_CTL_DEL, q.fd, nil)
		return err
	}
	q.armed = true
	return nil
}

// disarm takes the socket out of ep.
func (q *queue) disarm() {
	if q.armed {
		unix.EpollCtl(q.ep, unix.EPOLL_CTL_DEL, q.fd, nil)
		q.disarmXDP()
		q.armed = false
	}
}

// readReady is the progress goroutine's netpoller callback: it returns
// when ep has an event (which it takes), or at once while CQ pollers are
// back (run then takes the socket out of ep).
func (q *queue) readReady(uintptr) bool {
	if q.pollersActive() {
		return true
	}
	var evs [1]unix.EpollEvent
	n, _ := unix.EpollWait(q.ep, evs[:], 0)
	return n > 0
}

func (q *queue) needTicks() bool { return q.active.Load() > 0 || q.hasHeld() }

// kickRead makes the progress goroutine leave its wait and look at its
// timers: called when timer work appears (an RC QP gets work in flight,
// reorder injection holds a packet) and at close.
func (q *queue) kickRead() {
	q.epf.SetReadDeadline(time.Now()) // an error means closed: nobody waits
	q.wake()
}

func (q *queue) hasHeld() bool { return q.nheld.Load() > 0 }

// tick runs timers: RC retransmission and held packets. It takes the
// queue's locks only when it has work: a progress goroutine that the OS
// deschedules while holding the receive lock would stall a busy-polling
// worker for a whole time slice.
func (q *queue) tick(now time.Time) {
	if q.nrc.Load() > 0 {
		q.rxMu.Lock()
		for p := range q.rcPeers {
			p.rcTimer(now)
		}
		q.rxMu.Unlock()
	}
	if q.nheld.Load() > 0 {
		q.txMu.Lock()
		q.releaseHeld()
		q.flush()
		q.txMu.Unlock()
	}
}

// arrival moves a kernel receive stamp (wall-clock nanoseconds) onto the
// monotonic clock, given one reading of both clocks taken after the
// datagram was read. A stamp in the future (the wall clock stepped back
// since) is no measure: the datagram is stamped empty, the start of the
// last read that found the socket empty, instead.
func arrival(mono verbs.Time, wall, stamp int64, empty verbs.Time) verbs.Time {
	if stamp > wall {
		return empty
	}
	return mono - verbs.Time(wall-stamp)
}

// setStamps turns the delivery of kernel receive times on or off.
// Callers hold rxMu.
//
// A datagram is stamped with the start of the last read that found the
// socket empty (rxEmpty) unless it carries the kernel's receive time.
// While pollers keep reading the socket, that read is at most one poll
// old, and the kernel's times are off: each costs a control message per
// datagram, about half a microsecond per round trip of the serial
// ping-pong. A burst that finds rxEmpty older than staleEmpty (the socket
// has not been seen empty since: a busy server's, or one read after an
// idle spell or a stall) turns them on before it reads, so no datagram's
// age is over-estimated by more than staleEmpty; the next read that finds
// the socket empty turns them off. The kernel stamps every datagram as it
// arrives whatever the setting (the socket asked for stamps once, at its
// creation), so a datagram that arrived while they were off is read with
// its true arrival time once they are on.
func (q *queue) setStamps(on bool) {
	if q.stamps == on {
		return
	}
	v := 0
	if on {
		v = 1
	}
	if err := unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, v); err == nil {
		q.stamps = on
	}
}

// parseCmsgs reads the control messages of a received datagram: the UDP
// GRO segment size, the IP_PKTINFO destination address and the
// SO_TIMESTAMPNS receive time (wall-clock nanoseconds, 0 for none).
func parseCmsgs(b []byte) (gso int, dst [4]byte, haveDst bool, stamp int64) {
	const hdr = unix.SizeofCmsghdr
	for len(b) >= hdr {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(cm.Len)
		if l < hdr || l > len(b) {
			return
		}
		data := b[hdr:l]
		switch {
		case cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO && len(data) >= 2:
			gso = int(*(*uint16)(unsafe.Pointer(&data[0])))
		case cm.Level == unix.IPPROTO_IP && cm.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			dst, haveDst = pi.Addr, true
		case cm.Level == unix.SOL_SOCKET && cm.Type == unix.SCM_TIMESTAMPNS && len(data) >= int(unsafe.Sizeof(unix.Timespec{})):
			ts := (*unix.Timespec)(unsafe.Pointer(&data[0]))
			stamp = ts.Nano()
		}
		next := unix.CmsgSpace(l - hdr)
		if next >= len(b) {
			return
		}
		b = b[next:]
	}
	return
}

func binaryLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// steerProgram is a classic BPF program for SO_ATTACH_REUSEPORT_CBPF: the
// kernel runs it on a datagram with the data starting at the UDP payload,
// the BTH, and delivers the datagram to the socket of the group whose
// index it returns: DestQP (BTH bytes 5-7) mod n. Sockets join the group
// in the order the queues bind, so index i is queue i. A datagram too
// short to hold a BTH yields 0 (queue 0, which drops it).
func steerProgram(n int) []unix.SockFilter {
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0xffffff},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
}

// steer attaches steerProgram to the reuseport group of socket fd.
func steer(fd, n int) error {
	prog := steerProgram(n)
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fp)
}

// setBuf sets a socket buffer to n bytes: past net.core.rmem_max
// (wmem_max) where the process may (CAP_NET_ADMIN: the FORCE option),
// else as far as the limit allows.
func setBuf(fd, force, opt, n int) error {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, n)
}

// datagramCharge is what the kernel charges a socket's receive buffer
// for one queued datagram beyond its bytes (sk_buff and its truesize
// rounding); an estimate on the safe side of what loopback and common
// drivers charge for a small datagram.
const datagramCharge = 2048

// RecvBuffer is how many datagrams of payload bytes one queue's socket
// receive buffer holds (verbs.RecvBufferer): the smallest of the queues'
// SO_RCVBUF, as the kernel granted it, divided by what each datagram is
// charged (its headers, payload and datagramCharge).
func (d *device) RecvBuffer(payload int) int {
	least := -1
	for _, q := range d.queues {
		n, err := unix.GetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil {
			continue
		}
		if least < 0 || n < least {
			least = n
		}
	}
	if least < 0 {
		least = d.cfg.rcvbuf
	}
	per := datagramCharge + payload + verbs.GRHLen + 64 // BTH, DETH, ICRC, UDP/IP
	return least / per
}
