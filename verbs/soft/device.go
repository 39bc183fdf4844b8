//go:build linux

package soft

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

func init() { verbs.Register("soft", Open) }

// Provider limits.
const (
	maxSGE       = 8
	maxInline    = 4096
	maxMsgUD     = 4096
	defaultMaxQP = 1 << 16
	maxMR        = 1 << 16
	qpnBase      = 0x100
	activeMTU    = verbs.MTU4096
)

type config struct {
	addr    netip.AddrPort
	queues  int
	loss    float64
	dup     float64
	reorder float64
	seed    uint64
	gso     bool
	gro     bool
	rcvbuf  int
	sndbuf  int
	maxQP   int
	// tos is the IPv4 TOS byte (DSCP<<2 | ECN) of every packet sent:
	// RoCE traffic on a PFC fabric belongs in its lossless class.
	tos int
	// nicwire: behave on the wire as an RDMA NIC does (see nicwire.go).
	nicwire bool
	// advertise is the address peers reach a device bound to 0.0.0.0 at.
	advertise netip.Addr
	// xdp: receive through AF_XDP on this interface (xdp_linux.go).
	xdp     string
	xdpMode xdpMode
}

// faults reports whether any fault injection is on.
func (c *config) faults() bool { return c.loss > 0 || c.dup > 0 || c.reorder > 0 }

func parseConfig(device string, opts verbs.Options) (config, error) {
	c := config{queues: 1, gso: true, gro: true, rcvbuf: 4 << 20, sndbuf: 4 << 20, maxQP: defaultMaxQP, seed: 1}
	if device == "" {
		device = "127.0.0.1:0"
	}
	ap, err := netip.ParseAddrPort(device)
	if err != nil {
		return c, fmt.Errorf("%w: soft device %q is not IP:port: %v", verbs.ErrInvalidArgument, device, err)
	}
	if !ap.Addr().Unmap().Is4() {
		return c, fmt.Errorf("%w: soft device %q: need a specific IPv4 address", verbs.ErrInvalidArgument, device)
	}
	c.addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	for k, v := range opts {
		var err error
		switch k {
		case "queues":
			c.queues, err = strconv.Atoi(v)
			if err == nil && (c.queues < 1 || c.queues > 64) {
				err = fmt.Errorf("want 1..64")
			}
		case "loss":
			c.loss, err = parseProb(v)
		case "dup":
			c.dup, err = parseProb(v)
		case "reorder":
			c.reorder, err = parseProb(v)
		case "seed":
			c.seed, err = strconv.ParseUint(v, 10, 64)
		case "gso":
			c.gso, err = parseOnOff(v)
		case "gro":
			c.gro, err = parseOnOff(v)
		case "rcvbuf":
			c.rcvbuf, err = strconv.Atoi(v)
		case "sndbuf":
			c.sndbuf, err = strconv.Atoi(v)
		case "advertise":
			c.advertise, err = netip.ParseAddr(v)
			if err == nil && (!c.advertise.Unmap().Is4() || c.advertise.IsUnspecified()) {
				err = fmt.Errorf("want a specific IPv4 address")
			}
			c.advertise = c.advertise.Unmap()
		case "tos":
			c.tos, err = strconv.Atoi(v)
			if err == nil && (c.tos < 0 || c.tos > 255) {
				err = fmt.Errorf("want 0..255")
			}
		case "nicwire":
			c.nicwire, err = parseOnOff(v)
		case "xdp":
			c.xdp = v
			if v == "" {
				err = fmt.Errorf("want an interface name")
			}
		case "xdp_mode":
			c.xdpMode, err = parseXDPMode(v)
		case "max_qp":
			c.maxQP, err = strconv.Atoi(v)
			if err == nil && (c.maxQP < 1 || c.maxQP > 1<<20) {
				err = fmt.Errorf("want 1..%d", 1<<20)
			}
		default:
			err = fmt.Errorf("unknown option (have queues, loss, dup, reorder, seed, gso, gro, rcvbuf, sndbuf, max_qp, advertise, tos, nicwire, xdp, xdp_mode)")
		}
		if err != nil {
			return c, fmt.Errorf("%w: soft option %s=%q: %v", verbs.ErrInvalidArgument, k, v, err)
		}
	}
	if c.addr.Addr().IsUnspecified() && !c.advertise.IsValid() {
		return c, fmt.Errorf("%w: soft device %q listens on every address: set advertise=IP, the address peers reach it at", verbs.ErrInvalidArgument, device)
	}
	if !c.addr.Addr().IsUnspecified() && c.advertise.IsValid() && c.advertise != c.addr.Addr() {
		return c, fmt.Errorf("%w: advertise=%v differs from the device address %v", verbs.ErrInvalidArgument, c.advertise, c.addr.Addr())
	}
	if c.nicwire && (c.addr.Port() != verbs.RoCEv2Port || c.addr.Addr().IsUnspecified()) {
		return c, fmt.Errorf("%w: soft option nicwire=on needs a device at a specific IPv4 address and port %d, not %v",
			verbs.ErrInvalidArgument, verbs.RoCEv2Port, c.addr)
	}
	if c.addr.Port() != 0 && int(c.addr.Port())+c.queues-1 > 65535 {
		return c, fmt.Errorf("%w: soft device ports %d+%d overflow", verbs.ErrInvalidArgument, c.addr.Port(), c.queues)
	}
	return c, nil
}

func parseProb(v string) (float64, error) {
	p, err := strconv.ParseFloat(v, 64)
	if err == nil && (p < 0 || p > 1 || p != p) {
		err = fmt.Errorf("want a probability in [0,1]")
	}
	return p, err
}

func parseOnOff(v string) (bool, error) {
	switch v {
	case "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("want on or off")
}

// device is an open soft device.
type device struct {
	cfg    config
	name   string
	queues []*queue
	log    *slog.Logger

	qps    []atomic.Pointer[qp]
	qpMu   sync.Mutex
	nextQP int
	rr     atomic.Uint32 // round-robin queue assignment

	mrs    [maxMR]atomic.Pointer[mr]
	mrMu   sync.Mutex
	nextMR int

	// xdp: the AF_XDP receive path (xdp=), or nil.
	xdp *xdpDev

	// shared: the queues share the RoCEv2 port (SO_REUSEPORT), and the
	// kernel steers each packet to queue DestQP mod queues.
	shared bool

	ctr    counters
	holds  atomic.Int32 // open HoldDoorbell calls
	closed atomic.Bool
	nres   atomic.Int64 // live PDs and CQs
}

// Open opens a soft device: device is "IP:port" (see the package
// documentation for the options).
func Open(name string, opts verbs.Options) (verbs.Device, error) {
	cfg, err := parseConfig(name, opts)
	if err != nil {
		return nil, err
	}
	d := &device{cfg: cfg, qps: make([]atomic.Pointer[qp], cfg.maxQP), log: slog.Default().With("verbs", "soft")}
	// On the RoCEv2 port every queue listens on 4791, as a NIC does:
	// peers (NICs above all) send only there.
	d.shared = cfg.addr.Port() == verbs.RoCEv2Port && cfg.queues > 1
	fail := func(err error) (verbs.Device, error) {
		for _, q := range d.queues {
			q.close()
		}
		d.closeXDP()
		return nil, err
	}
	for i := 0; i < cfg.queues; i++ {
		port := cfg.addr.Port()
		if port != 0 && !d.shared {
			port += uint16(i)
		}
		q, err := newQueue(d, i, netip.AddrPortFrom(cfg.addr.Addr(), port))
		if err != nil {
			return fail(err)
		}
		d.queues = append(d.queues, q)
	}
	if d.shared {
		if err := steer(d.queues[0].fd, len(d.queues)); err != nil {
			return fail(fmt.Errorf("soft: steering the shared port's packets to queues: %w", err))
		}
	}
	if cfg.xdp != "" {
		if err := d.openXDP(); err != nil {
			return fail(err)
		}
	}
	d.name = "soft:" + d.queues[0].local.String()
	for _, q := range d.queues {
		q.start()
	}
	return d, nil
}

func (d *device) Name() string { return d.name }

func (d *device) Attr() verbs.DeviceAttr {
	return verbs.DeviceAttr{
		MaxQP: d.cfg.maxQP, MaxQPWR: 1 << 15, MaxSGE: maxSGE, MaxCQE: 1 << 20,
		MaxMRSize: 1 << 32, MaxInline: maxInline, MaxRdAtomic: 16,
		ActiveMTU: activeMTU, Queues: len(d.queues), SourcePorts: true, ArrivedWithin: d.arrivedWithin(),
	}
}

// arrivedWithin is Attr's ArrivedWithin: arrivedWithin when every
// queue's socket stamps receive times, else 0 (a socket that cannot
// stamps a datagram with the last read that found it empty, however old).
func (d *device) arrivedWithin() time.Duration {
	if d.xdp != nil {
		return 0 // an AF_XDP frame carries no receive time
	}
	for _, q := range d.queues {
		if !q.canStamp {
			return 0
		}
	}
	return arrivedWithin
}

func (d *device) Close() error {
	if d.nres.Load() != 0 {
		return fmt.Errorf("%w: device %s has open PDs or CQs", verbs.ErrBusy, d.name)
	}
	if d.closed.Swap(true) {
		return fmt.Errorf("%w: device %s", verbs.ErrClosed, d.name)
	}
	for _, q := range d.queues {
		q.close()
	}
	d.closeXDP()
	return nil
}

var (
	_ verbs.Counters        = (*device)(nil)
	_ verbs.DoorbellBatcher = (*device)(nil)
)

// HoldDoorbell implements verbs.DoorbellBatcher.
func (d *device) HoldDoorbell() { d.holds.Add(1) }

// RingDoorbell implements verbs.DoorbellBatcher: once the last hold is
// released, every queue sends what PostSend recorded.
func (d *device) RingDoorbell() {
	if d.holds.Add(-1) > 0 {
		return
	}
	for _, q := range d.queues {
		q.txMu.Lock()
		q.flush()
		q.txMu.Unlock()
	}
}

// VisitCounters implements verbs.Counters.
func (d *device) VisitCounters(f func(string, uint64)) {
	var io ioTotals
	for _, q := range d.queues {
		io.add(q)
	}
	d.ctr.visit(&io, f)
	d.visitXDP(f)
}

func (d *device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	d.nres.Add(1)
	return &pd{d: d}, nil
}

func (d *device) lookupQP(qpn uint32) *qp {
	i := int(qpn) - qpnBase
	if i < 0 || i >= len(d.qps) {
		return nil
	}
	return d.qps[i].Load()
}

// lookupMR returns the live region with the given key, or nil.
func (d *device) lookupMR(key uint32, remote bool) *mr {
	m := d.mrs[(key>>8)%maxMR].Load()
	if m == nil {
		return nil
	}
	if remote && m.rkey != key || !remote && m.lkey != key {
		return nil
	}
	return m
}

// pd is a protection domain.
type pd struct {
	d      *device
	nres   atomic.Int64
	closed atomic.Bool
}

var _ verbs.PD = (*pd)(nil)

func (p *pd) Close() error {
	if p.nres.Load() != 0 {
		return fmt.Errorf("%w: PD has open MRs, AHs or QPs", verbs.ErrBusy)
	}
	if p.closed.Swap(true) {
		return verbs.ErrClosed
	}
	p.d.nres.Add(-1)
	return nil
}

// mr is a registered memory region in anonymous mmap'd memory.
type mr struct {
	pd     *pd
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	access verbs.Access
	idx    int
	closed atomic.Bool
	// policy, when set, restricts remote atomics (RegAtomicMR).
	policy *atomicPolicy
}

var _ verbs.MR = (*mr)(nil)

func (p *pd) RegMR(length int, access verbs.Access) (verbs.MR, error) {
	m, err := p.regMR(length, access, nil)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (p *pd) regMR(length int, access verbs.Access, pol *atomicPolicy) (*mr, error) {
	if p.closed.Load() {
		return nil, verbs.ErrClosed
	}
	if length <= 0 || length > 1<<32 {
		return nil, fmt.Errorf("%w: MR length %d", verbs.ErrInvalidArgument, length)
	}
	if access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic) != 0 {
		return nil, fmt.Errorf("%w: access flags 0x%x", verbs.ErrInvalidArgument, uint32(access))
	}
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: remote write or atomic access needs local write", verbs.ErrInvalidArgument)
	}
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("soft: allocating %d-byte MR: %w", length, err)
	}
	d := p.d
	d.mrMu.Lock()
	idx := -1
	for i := 0; i < maxMR; i++ {
		j := (d.nextMR + i) % maxMR
		if j != 0 && d.mrs[j].Load() == nil {
			idx = j
			break
		}
	}
	if idx < 0 {
		d.mrMu.Unlock()
		unix.Munmap(buf)
		return nil, fmt.Errorf("%w: out of memory region slots", verbs.ErrQueueFull)
	}
	d.nextMR = idx + 1
	m := &mr{pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access, idx: idx, policy: pol}
	m.lkey = uint32(idx)<<8 | uint32(rand.IntN(256))
	m.rkey = uint32(idx)<<8 | uint32(rand.IntN(256))
	d.mrs[idx].Store(m)
	d.mrMu.Unlock()
	p.nres.Add(1)
	return m, nil
}

func (m *mr) Bytes() []byte { return m.buf }
func (m *mr) Addr() uint64  { return m.addr }
func (m *mr) LKey() uint32  { return m.lkey }
func (m *mr) RKey() uint32  { return m.rkey }

func (m *mr) Close() error {
	if m.closed.Swap(true) {
		return verbs.ErrClosed
	}
	d := m.pd.d
	d.mrMu.Lock()
	d.mrs[m.idx].Store(nil)
	d.mrMu.Unlock()
	m.pd.nres.Add(-1)
	// Every use of a region's memory by the provider happens under a
	// queue's receive or transmit lock, after a table lookup that can no
	// longer find it: once each lock has been taken and released, nothing
	// touches the memory and it can be unmapped.
	for _, q := range d.queues {
		q.rxMu.Lock()
		q.rxMu.Unlock() //nolint:staticcheck // a barrier
		q.txMu.Lock()
		q.txMu.Unlock() //nolint:staticcheck // a barrier
	}
	if err := unix.Munmap(m.buf); err != nil {
		return fmt.Errorf("soft: unmapping MR: %w", err)
	}
	return nil
}

// slice returns the bytes [addr, addr+n) of m, or false when they are not
// all inside it.
func (m *mr) slice(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// ah is an address handle.
type ah struct {
	pd     *pd
	dest   verbs.Address
	peers  []*peer // one per queue: the flow differs by source port
	closed atomic.Bool
}

var _ verbs.AH = (*ah)(nil)

func (p *pd) CreateAH(attr verbs.AHAttr) (verbs.AH, error) {
	if p.closed.Load() {
		return nil, verbs.ErrClosed
	}
	a := &ah{pd: p, dest: attr.Dest}
	for _, q := range p.d.queues {
		pe, err := q.newPeer(attr.Dest)
		if err != nil {
			return nil, err
		}
		a.peers = append(a.peers, pe)
	}
	p.nres.Add(1)
	return a, nil
}

func (a *ah) Close() error {
	if a.closed.Swap(true) {
		return verbs.ErrClosed
	}
	a.pd.nres.Add(-1)
	return nil
}

// counters are the device's event counts, but for those of the data
// path's system calls, which each queue keeps (ioCounts): a worker's
// queue counts on its own cache lines.
type counters struct {
	dropNoRecv, dropQKey, dropPKey, dropICRC, dropQPN, dropMalformed atomic.Uint64
	dropOpcode, dropRKey, dropPSN, dropLength                        atomic.Uint64
	rcRetransmits, rcDuplicates, rcNaks                              atomic.Uint64
	faultLoss, faultDup, faultReorder, cqOverrun, gsoFallback        atomic.Uint64
	rxIPID, atomicRefused, dropDeadline                              atomic.Uint64
}

// ioCounts are one queue's packets, datagrams and system calls, written
// by whichever thread drives or sends through the queue. The transmit
// counts are plain words under the queue's txMu, which every sender
// holds for a bounded time (no locked instruction per send on the data
// path), and VisitCounters reads them under it. The receive counts are
// atomic: a receiver may hold rxMu for as long as a flood keeps its
// bursts full (drain), and a metrics scrape must not wait for that.
type ioCounts struct {
	rxPackets, rxSyscalls, rxDatagrams atomic.Uint64
	txPackets, txSyscalls, txDatagrams uint64 // under txMu
}

// ioTotals adds up the queues' ioCounts.
type ioTotals struct {
	rxPackets, txPackets, rxSyscalls, txSyscalls, rxDatagrams, txDatagrams uint64
}

// add adds q's counts, the transmit ones under q's txMu.
func (t *ioTotals) add(q *queue) {
	c := &q.io
	t.rxPackets += c.rxPackets.Load()
	t.rxSyscalls += c.rxSyscalls.Load()
	t.rxDatagrams += c.rxDatagrams.Load()
	q.txMu.Lock()
	t.txPackets += c.txPackets
	t.txSyscalls += c.txSyscalls
	t.txDatagrams += c.txDatagrams
	q.txMu.Unlock()
}

func (c *counters) visit(io *ioTotals, f func(string, uint64)) {
	f(verbs.CounterRxPackets, io.rxPackets)
	f(verbs.CounterTxPackets, io.txPackets)
	f(verbs.CounterRxSyscalls, io.rxSyscalls)
	f(verbs.CounterTxSyscalls, io.txSyscalls)
	f(verbs.CounterDropNoRecv, c.dropNoRecv.Load())
	f(verbs.CounterDropBadQKey, c.dropQKey.Load())
	f(verbs.CounterDropBadPKey, c.dropPKey.Load())
	f(verbs.CounterDropBadICRC, c.dropICRC.Load())
	f(verbs.CounterDropUnknownQPN, c.dropQPN.Load())
	f(verbs.CounterDropMalformed, c.dropMalformed.Load())
	f(verbs.CounterDropBadOpcode, c.dropOpcode.Load())
	f(verbs.CounterDropRKey, c.dropRKey.Load())
	f(verbs.CounterDropPSN, c.dropPSN.Load())
	f(verbs.CounterDropLength, c.dropLength.Load())
	f(verbs.CounterDropDeadline, c.dropDeadline.Load())
	f(verbs.CounterRCRetransmits, c.rcRetransmits.Load())
	f(verbs.CounterRCDuplicates, c.rcDuplicates.Load())
	f(verbs.CounterRCNaks, c.rcNaks.Load())
	f(verbs.CounterInjectedLoss, c.faultLoss.Load())
	f(verbs.CounterInjectedDup, c.faultDup.Load())
	f(verbs.CounterInjectedReorder, c.faultReorder.Load())
	f(verbs.CounterAtomicRefused, c.atomicRefused.Load())
	f("cq_overrun", c.cqOverrun.Load())
	f("gso_fallback", c.gsoFallback.Load())
	f("rx_datagrams", io.rxDatagrams)
	f("tx_datagrams", io.txDatagrams)
	// Packets whose ICRC was right for a non-zero IPv4 ID (GSO segments,
	// NIC and rxe senders).
	f("rx_icrc_ip_id", c.rxIPID.Load())
}
