package wire

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs/rocev2"
)

// Socket geometry.
const (
	rxMsgs     = 64        // datagrams per recvmmsg
	rxBufLen   = 8 << 10   // one GRO super-packet: up to 64 answers of 36 bytes, with room
	rxCtrlLen  = 64        // the UDP_GRO control message
	txMaxHdrs  = 1024      // GSO messages per sendmmsg
	txArenaLen = 256 << 10 // request bytes per sendmmsg
	pktinfoLen = 32        // CMSG_SPACE(sizeof(struct in_pktinfo))
	segLen     = 24        // CMSG_SPACE(sizeof(uint16))
	sockBuf    = 8 << 20
	expireTick = int64(time.Millisecond)
	// QPNBase is the QPN of flow 0; flow i is QPNBase+i. In HERD that is
	// its UD QP (answers); its UC QP (writes) is QPNBase+UCOffset+i.
	QPNBase  = 0x5e000
	UCOffset = 0x10000
)

// Errors.
var (
	ErrConfig = errors.New("wire: invalid config")
	ErrSocket = errors.New("wire: socket")
	ErrTarget = errors.New("wire: no target")
)

// Kind is what the generator talks to.
type Kind int

// The servers the generator drives.
const (
	Seqd         Kind = iota // seqd in Spec-S0: answers carry values, all checked
	ProviderEcho             // the provider's header-only echo server: answers echo the immediate
	RawEcho                  // a raw UDP echo: answers are the requests sent back
	HERD                     // seqd in herd mode: UC WRITEs of request slots, UD answers with the value
	ERPC                     // seqd in erpc mode: UD SENDs of eRPC requests per session slot, answers with the value
)

func (k Kind) String() string {
	switch k {
	case Seqd:
		return "seqd"
	case ProviderEcho:
		return "provider-echo"
	case RawEcho:
		return "raw-echo"
	case HERD:
		return "herd"
	case ERPC:
		return "erpc"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Config configures a generator.
type Config struct {
	Flows  int // emulated client QPs, 1..65536
	Window int // requests outstanding per flow (a grant may lower it)
	// Timeout: a request unanswered this long is given up and counted
	// (default spec.MaxAnswerDelay: by the protocol's assumptions no
	// answer comes later, as the server drops a request older than
	// spec.MaxResidence; answers already waiting in the generator's socket
	// are read before anything is given up, so a generator that was
	// descheduled does not give up answers it has).
	Timeout time.Duration
	// AnswerQuarantine is how long a tag released by its answer is kept
	// unused (default 0: only a network or server that duplicates packets
	// could answer it again; such answers are counted as stale when they
	// find the tag free). Tags given up on a timeout are quarantined for
	// spec.DefaultQuarantine whatever this says.
	AnswerQuarantine time.Duration
	// Source is flow 0's source address; flow i uses Source+i, or with
	// Sources, Source+i×Sources/Flows. Default 127.77.0.1 (the loopback
	// /8).
	Source netip.Addr
	// Sources is how many source addresses the flows share (0: one
	// each): Sources client hosts, each with Flows/Sources sessions. The
	// requests of flows that share a source, a server address and a
	// server QP leave in one GSO message, as the soft provider sends a
	// process's QPs' requests to one server QP.
	Sources int
	// Credits: in eRPC, the credits each session asks for (0: the
	// window). Above spec.ERPCSlots they reserve receives at the server
	// that no request of the session's can use: a session has no more
	// requests in flight than slots.
	Credits int
	// Keep is the number of values kept for the uniqueness check
	// (default 1<<24, 128 MiB).
	Keep int
	// NoICRC skips the ICRC check of answers.
	NoICRC bool
	// InFlight caps the requests outstanding over all flows (0: only the
	// windows do). With many flows it keeps the server's queue short: a
	// request that waits longer than spec.MaxResidence in the server's
	// socket is dropped unanswered, so requests in flight beyond what the
	// server serves in that time only turn into drops. Flows take turns
	// (FIFO), each still a flow of its own.
	InFlight int
}

func (c *Config) validate() error {
	if c.Timeout == 0 {
		c.Timeout = spec.MaxAnswerDelay
	}
	if !c.Source.IsValid() {
		c.Source = netip.AddrFrom4([4]byte{127, 77, 0, 1})
	}
	if c.Keep == 0 {
		c.Keep = 1 << 24
	}
	switch {
	case c.Flows < 1 || c.Flows > 1<<16:
		return fmt.Errorf("%w: %d flows", ErrConfig, c.Flows)
	case c.Window < 1 || c.Window > spec.MaxWindow:
		return fmt.Errorf("%w: window %d", ErrConfig, c.Window)
	case !c.Source.Is4():
		return fmt.Errorf("%w: source %v is not IPv4", ErrConfig, c.Source)
	case c.Timeout < 0 || c.AnswerQuarantine < 0 || c.Keep < 0 || c.InFlight < 0:
		return fmt.Errorf("%w: negative timeout, quarantine or keep", ErrConfig)
	}
	return nil
}

// FlowTarget is where one flow sends: a server QP.
type FlowTarget struct {
	Server netip.AddrPort
	QPN    uint32
	QKey   uint32
	Window int // granted; 0: the generator's
	// AnswerQKey is the Q_Key this flow's answers carry (its session's;
	// 0: Target.AnswerQKey).
	AnswerQKey uint32
	// HERD: the address of the flow's slot 0 in the server's request
	// region, and its R_Key.
	RemoteAddr uint64
	RKey       uint32
	// ERPC: the session the flow's endpoint was admitted in.
	Session uint64
}

// Target is a server the flows were admitted to.
type Target struct {
	Kind  Kind
	Flows []FlowTarget // one per flow
	// AnswerQKey is the Q_Key answers must carry (0: any);
	// AnswerQPNs the QPNs they may come from (none: any).
	AnswerQKey uint32
	AnswerQPNs []uint32
	// High is a recent value (Connect's), known as of the run's start.
	High uint64
	// HighPeriod is how often the server's high part advances with its
	// clock (spec.HighPeriod of its format; 0: not at all). Set, the
	// generator predicts the rollover from its answers, as the client
	// does (spec.Speculator).
	HighPeriod time.Duration
}

// Gen is the generator: one socket and F flows. It is driven by Run on
// one goroutine (locked to its thread) at a time.
type Gen struct {
	cfg   Config
	fd    int
	port  uint16
	src   [][4]byte
	tgt   Target
	flows []*Flow // Spec-S0 and the echoes
	snd   []sender
	hflow []*HerdFlow // HERD
	hsnd  []herdSender
	eflow []*ERPCFlow // ERPC
	esnd  []erpcSender
	rcv   []receiver
	dst   []unix.RawSockaddrInet4
	dqp   []uint32 // per flow: the server QP its requests go to
	ctrl  []byte   // per flow: IP_PKTINFO, then UDP_SEGMENT
	ansQ  []uint32 // per flow: the Q_Key its answers carry (0: any)

	arena []byte
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec

	rbufs  [][]byte
	rhdrs  []unix.Mmsghdr
	riovs  []unix.Iovec
	rnames []unix.RawSockaddrInet4
	rctrl  []byte
	dirty  int

	out int // requests outstanding over all flows
	// busy: the flows that sent since they last had none outstanding,
	// the expiry tick's list (inBusy: in it); stranded: flows popped that
	// could send nothing though they had room (a quarantined tag), which
	// the tick makes ready again. Scanning every flow each tick cost the
	// generator a third of its time and stalled it 0.4 ms at 20,000.
	busy     []int32
	inBusy   []bool
	stranded []int32
	ready    []int32 // flows that may have room, FIFO
	rhead    int
	rn       int
	inReady  []bool

	chk  *verify.Online
	spec spec.Speculator
	hist *hdrhistogram.Histogram
	st   Stats
	ex   []string

	stop atomic.Bool
	// epoch is the zero of the generator's clock (now), kept across
	// Runs: the flows' send times and quarantines stay on one clock.
	epoch time.Time
}

// now reads the generator's clock: ns since its epoch.
func (g *Gen) now() int64 { return int64(time.Since(g.epoch)) }

// Stats are a run's counts.
type Stats struct {
	Sent, Answers   uint64 // over the whole run
	Measured        uint64 // answers inside the measured interval
	Lost            uint64 // requests given up after the timeout
	Stale           uint64 // answers for no outstanding request
	Forged          uint64 // wrong Q_Key or answer QP
	BadICRC         uint64
	Malformed       uint64
	SpecMisses      uint64 // full answers
	RealTime        uint64
	Regressions     uint64
	Duplicates      uint64
	Reanswered      uint64 // eRPC: a copy of an answer with another value (at-most-once broken)
	DupAnswers      uint64 // eRPC: a copy of an answer with the same value
	SendErrors      uint64 // requests that could not be sent (given up after the timeout)
	SendWaits       uint64 // waits for room in the socket's send buffer
	Syscalls        uint64 // sendmmsg + recvmmsg
	Iterations      uint64
	RxDatagrams     uint64
	TxMessages      uint64
	MeasuredSeconds float64
	// BusySeconds is the part of the measured interval the generator
	// spent in loop iterations that moved packets (the rest it polled an
	// empty socket, or was not running): near MeasuredSeconds, the
	// generator is the bottleneck.
	BusySeconds float64
}

// Add adds o's counts and seconds to s.
func (s *Stats) Add(o Stats) {
	s.Sent += o.Sent
	s.Answers += o.Answers
	s.Measured += o.Measured
	s.Lost += o.Lost
	s.Stale += o.Stale
	s.Forged += o.Forged
	s.BadICRC += o.BadICRC
	s.Malformed += o.Malformed
	s.SpecMisses += o.SpecMisses
	s.RealTime += o.RealTime
	s.Regressions += o.Regressions
	s.Duplicates += o.Duplicates
	s.Reanswered += o.Reanswered
	s.DupAnswers += o.DupAnswers
	s.SendErrors += o.SendErrors
	s.SendWaits += o.SendWaits
	s.Syscalls += o.Syscalls
	s.Iterations += o.Iterations
	s.RxDatagrams += o.RxDatagrams
	s.TxMessages += o.TxMessages
	s.MeasuredSeconds += o.MeasuredSeconds
	s.BusySeconds += o.BusySeconds
}

// Violations is the number of answers that broke a promise.
func (s *Stats) Violations() uint64 { return s.RealTime + s.Regressions + s.Duplicates + s.Reanswered }

// New opens the generator's socket (INADDR_ANY, an ephemeral port, GRO
// on) and makes its flows. Targets come from Admit or SetTarget.
func New(cfg Config) (*Gen, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Gen{cfg: cfg, fd: -1, epoch: time.Now()}
	if err := g.open(); err != nil {
		return nil, err
	}
	base := cfg.Source.As4()
	b := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	g.src = make([][4]byte, cfg.Flows)
	sources := cfg.Flows
	if cfg.Sources > 0 {
		sources = min(cfg.Sources, cfg.Flows)
	}
	for i := range g.src {
		a := b + uint32(i*sources/cfg.Flows)
		g.src[i] = [4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}
		if g.src[i][0] != base[0] {
			g.Close()
			return nil, fmt.Errorf("%w: %d flows from %v leave its /8", ErrConfig, cfg.Flows, cfg.Source)
		}
	}
	g.ctrl = make([]byte, cfg.Flows*(pktinfoLen+segLen))
	for i := range cfg.Flows {
		c := g.ctrl[i*(pktinfoLen+segLen):]
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		cm.Level, cm.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		cm.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&c[unix.CmsgLen(0)]))
		pi.Spec_dst = g.src[i]
		cm = (*unix.Cmsghdr)(unsafe.Pointer(&c[pktinfoLen]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafe.Pointer(&c[pktinfoLen+unix.CmsgLen(0)])) = reqLen
	}
	g.arena = make([]byte, txArenaLen)
	g.hdrs = make([]unix.Mmsghdr, txMaxHdrs)
	g.iovs = make([]unix.Iovec, txMaxHdrs)
	g.rbufs = make([][]byte, rxMsgs)
	g.rhdrs = make([]unix.Mmsghdr, rxMsgs)
	g.riovs = make([]unix.Iovec, rxMsgs)
	g.rnames = make([]unix.RawSockaddrInet4, rxMsgs)
	g.rctrl = make([]byte, rxMsgs*rxCtrlLen)
	for i := range g.rbufs {
		g.rbufs[i] = make([]byte, rxBufLen)
		g.riovs[i] = unix.Iovec{Base: &g.rbufs[i][0]}
		g.riovs[i].SetLen(rxBufLen)
		h := &g.rhdrs[i].Hdr
		h.Iov = &g.riovs[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&g.rnames[i]))
		h.Control = &g.rctrl[i*rxCtrlLen]
	}
	g.dirty = rxMsgs
	g.ready = make([]int32, cfg.Flows)
	g.inReady = make([]bool, cfg.Flows)
	g.inBusy = make([]bool, cfg.Flows)
	g.chk = verify.NewOnline(cfg.Keep)
	g.hist = hdrhistogram.New(1, int64(60*time.Second), 3)
	return g, nil
}

func (g *Gen) open() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSocket, err)
	}
	g.fd = fd
	err = errors.Join(
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO),
		unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1),
		unix.Bind(fd, &unix.SockaddrInet4{}),
	)
	// Large buffers: FORCE where privileged, else what rmem_max allows.
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], sockBuf) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], sockBuf)
		}
	}
	if err == nil {
		var sa unix.Sockaddr
		if sa, err = unix.Getsockname(fd); err == nil {
			g.port = uint16(sa.(*unix.SockaddrInet4).Port)
		}
	}
	if err != nil {
		unix.Close(fd)
		g.fd = -1
		return fmt.Errorf("%w: %v", ErrSocket, err)
	}
	return nil
}

// Close closes the socket.
func (g *Gen) Close() error {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	return nil
}

// Port is the UDP port every flow sends from and receives on.
func (g *Gen) Port() uint16 { return g.port }

// Flows is the number of flows.
func (g *Gen) Flows() int { return g.cfg.Flows }

// Window is the window each flow asks for.
func (g *Gen) Window() int { return g.cfg.Window }

// FlowAddr is flow i's address and QPN, as registered with the server
// (in HERD: its UD QP, which the answers go to).
func (g *Gen) FlowAddr(i int) (netip.AddrPort, uint32) {
	return netip.AddrPortFrom(netip.AddrFrom4(g.src[i]), g.port), QPNBase + uint32(i)
}

// nflows is the number of flows with a target.
func (g *Gen) nflows() int { return max(len(g.flows), len(g.hflow), len(g.eflow)) }

// room reports whether flow i may send more now.
func (g *Gen) room(i int) bool {
	if g.hflow != nil {
		return g.hflow[i].Outstanding() < g.hflow[i].Window()
	}
	if g.eflow != nil {
		return g.eflow[i].Outstanding() < g.eflow[i].Window()
	}
	return g.flows[i].Outstanding() < g.flows[i].Window()
}

// SetTarget points the flows at t and resets the flows' state and the
// counts; the checker's floor stays (values only grow).
func (g *Gen) SetTarget(t Target) error {
	if len(t.Flows) != g.cfg.Flows {
		return fmt.Errorf("%w: %d flow targets for %d flows", ErrTarget, len(t.Flows), g.cfg.Flows)
	}
	g.tgt = t
	g.flows, g.snd, g.hflow, g.hsnd, g.eflow, g.esnd = nil, nil, nil, nil, nil, nil
	switch t.Kind {
	case HERD:
		g.hflow = make([]*HerdFlow, g.cfg.Flows)
		g.hsnd = make([]herdSender, g.cfg.Flows)
	case ERPC:
		g.eflow = make([]*ERPCFlow, g.cfg.Flows)
		g.esnd = make([]erpcSender, g.cfg.Flows)
	default:
		g.flows = make([]*Flow, g.cfg.Flows)
		g.snd = make([]sender, g.cfg.Flows)
	}
	g.rcv = make([]receiver, g.cfg.Flows)
	g.dst = make([]unix.RawSockaddrInet4, g.cfg.Flows)
	g.dqp = make([]uint32, g.cfg.Flows)
	g.ansQ = make([]uint32, g.cfg.Flows)
	for i, ft := range t.Flows {
		g.ansQ[i] = t.AnswerQKey
		if ft.AnswerQKey != 0 {
			g.ansQ[i] = ft.AnswerQKey
		}
		w := g.cfg.Window
		if ft.Window > 0 {
			w = min(w, ft.Window)
		}
		if !ft.Server.Addr().Is4() {
			return fmt.Errorf("%w: flow %d: server %v is not IPv4", ErrTarget, i, ft.Server)
		}
		srv := ft.Server.Addr().As4()
		fl := rocev2.Flow{Src: g.src[i], Dst: srv, SrcPort: g.port, DstPort: ft.Server.Port()}
		switch t.Kind {
		case HERD:
			f, err := NewHerdFlow(w)
			if err != nil {
				return err
			}
			g.hflow[i] = f
			g.hsnd[i] = newHerdSender(fl, ft.QPN, ft.RemoteAddr, ft.RKey)
		case ERPC:
			f, err := NewERPCFlow(ft.Session, min(w, spec.ERPCSlots))
			if err != nil {
				return err
			}
			g.eflow[i] = f
			g.esnd[i] = newERPCSender(fl, ft.QPN, ft.QKey, QPNBase+uint32(i), ft.Session)
		default:
			f, err := NewFlow(FlowConfig{Window: w, AnswerQuarantine: int64(g.cfg.AnswerQuarantine)})
			if err != nil {
				return err
			}
			g.flows[i] = f
			g.snd[i] = newSender(fl, ft.QPN, ft.QKey, QPNBase+uint32(i))
		}
		g.rcv[i] = receiver{flow: rocev2.Flow{Dst: g.src[i], DstPort: g.port}}
		g.dst[i] = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: srv}
		g.dqp[i] = ft.QPN
		p := ft.Server.Port()
		g.dst[i].Port = p<<8 | p>>8
	}
	seg := uint16(reqLen)
	switch t.Kind {
	case HERD:
		seg = herdReqLen
	case ERPC:
		seg = erpcReqLen
	}
	for i := range g.cfg.Flows {
		*(*uint16)(unsafe.Pointer(&g.ctrl[i*(pktinfoLen+segLen)+pktinfoLen+unix.CmsgLen(0)])) = seg
	}
	g.spec.Forget()
	g.spec.SetPeriod(t.HighPeriod)
	if t.High != 0 {
		g.spec.Learn(time.Duration(g.now()), t.High)
	}
	g.rhead, g.rn, g.out = 0, 0, 0
	clear(g.inReady)
	clear(g.inBusy)
	g.busy, g.stranded = g.busy[:0], g.stranded[:0]
	for i := range g.nflows() {
		g.push(int32(i))
	}
	g.st = Stats{}
	g.ex = g.ex[:0]
	g.hist.Reset()
	g.chk.Reset()
	return nil
}

func (g *Gen) push(i int32) {
	if g.inReady[i] {
		return
	}
	g.inReady[i] = true
	g.ready[(g.rhead+g.rn)%len(g.ready)] = i
	g.rn++
}

func (g *Gen) pop() int32 {
	i := g.ready[g.rhead]
	g.rhead = (g.rhead + 1) % len(g.ready)
	g.rn--
	g.inReady[i] = false
	return i
}

// okFrom reports whether an answer to flow fi with this Q_Key from this
// QPN is the server's.
func (g *Gen) okFrom(fi int, qkey, qpn uint32) bool {
	if q := g.ansQ[fi]; q != 0 && qkey != q {
		return false
	}
	if len(g.tgt.AnswerQPNs) == 0 {
		return true
	}
	for _, q := range g.tgt.AnswerQPNs {
		if q == qpn {
			return true
		}
	}
	return false
}

// Stop makes a running Run end its measurement now.
func (g *Gen) Stop() { g.stop.Store(true) }

// Phase is called by Run on its own thread when the measured interval
// starts (true) and ends (false).
type Phase func(start bool)

// Result is what Run measured.
type Result struct {
	Stats
	Hist     *hdrhistogram.Histogram // latency of the measured answers, ns, batch-granular
	Examples []string                // violations, a few
	Kept     int                     // values checked for uniqueness
	Unkept   uint64
}

// OpsPerSec is the measured throughput.
func (r *Result) OpsPerSec() float64 {
	if r.MeasuredSeconds <= 0 {
		return 0
	}
	return float64(r.Measured) / r.MeasuredSeconds
}

// Err is nil for a run without violations.
func (r *Result) Err() error {
	if v := r.Violations(); v > 0 {
		ex := ""
		if len(r.Examples) > 0 {
			ex = ": e.g. " + r.Examples[0]
		}
		return fmt.Errorf("wire: %d violations (%d real-time, %d flow regressions, %d duplicates, %d reanswered)%s",
			v, r.RealTime, r.Regressions, r.Duplicates, r.Reanswered, ex)
	}
	return nil
}

// Run drives the flows for warmup, then measures for d, then waits up to
// a timeout for the answers still outstanding. Each run starts its counts
// afresh; the flows keep their state. phase (if not nil) is
// called when the measurement starts and ends. It runs on the calling
// goroutine, locked to its thread; pin the thread before if wanted.
func (g *Gen) Run(ctx context.Context, warmup, d time.Duration, phase Phase) (*Result, error) {
	if g.nflows() == 0 {
		return nil, ErrTarget
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g.stop.Store(false)
	g.st, g.ex = Stats{}, g.ex[:0]
	g.hist.Reset()
	g.chk.Reset()
	// Every flow with room is ready: the last run's drain made ready
	// none whose requests it gave up (expire with refill off).
	for i := range g.nflows() {
		if g.room(i) {
			g.push(int32(i))
		}
	}
	done := ctx.Done()
	from := g.now() + int64(warmup)
	until := from + int64(d)
	var measStart, measEnd int64
	stage := 0 // 0 warm-up, 1 measuring, 2 draining
	drainEnd := int64(0)
	nextExpire := int64(0)
	timeout := int64(g.cfg.Timeout)
	var prev int64
	worked := false
	for {
		now := g.now() // the one clock read of this batch
		if worked && stage == 1 {
			g.st.BusySeconds += float64(now-prev) / 1e9
		}
		prev = now
		rx0, tx0 := g.st.RxDatagrams, g.st.TxMessages
		g.st.Iterations++
		if g.st.Iterations&1023 == 0 {
			select {
			case <-done:
				g.stop.Store(true)
			default:
			}
		}
		if stage == 0 && now >= from {
			stage, measStart = 1, now
			if phase != nil {
				phase(true)
			}
		}
		if stage == 1 && (now >= until || g.stop.Load()) {
			stage, measEnd = 2, now
			if phase != nil {
				phase(false)
			}
			drainEnd = now + timeout
		}
		if stage == 2 && (g.out <= 0 || now >= drainEnd) {
			break
		}
		g.receive(now, stage == 1)
		if now >= nextExpire {
			nextExpire = now + expireTick
			g.expire(now, timeout, stage < 2)
		}
		if stage < 2 {
			g.send(now)
		}
		worked = g.st.RxDatagrams != rx0 || g.st.TxMessages != tx0
	}
	if measEnd == 0 {
		measEnd = measStart
	}
	g.st.MeasuredSeconds = float64(measEnd-measStart) / 1e9
	if n, first := g.chk.Duplicates(); n > 0 {
		g.st.Duplicates += uint64(n)
		g.example(fmt.Sprintf("%v: value %d received twice", verify.Duplicate, first))
	}
	r := &Result{Stats: g.st, Hist: g.hist, Examples: g.ex, Kept: g.chk.Kept(), Unkept: g.chk.Unverified}
	return r, r.Err()
}

// expire gives up the requests of the busy flows unanswered for timeout,
// and drops the flows with none outstanding from the busy list; when
// refill, it makes the busy and the stranded flows with room ready.
func (g *Gen) expire(now, timeout int64, refill bool) {
	keep := g.busy[:0]
	for _, i := range g.busy {
		var n, out int
		switch {
		case g.hflow != nil:
			n, out = g.hflow[i].Expire(now, timeout), g.hflow[i].Outstanding()
		case g.eflow != nil:
			n, out = g.eflow[i].Expire(now, timeout), g.eflow[i].Outstanding()
		default:
			n, out = g.flows[i].Expire(now, timeout), g.flows[i].Outstanding()
		}
		g.st.Lost += uint64(n)
		g.out -= n
		if out > 0 {
			keep = append(keep, i)
		} else {
			g.inBusy[i] = false
		}
		if refill && g.room(int(i)) {
			g.push(i)
		}
	}
	g.busy = keep
	for _, i := range g.stranded {
		if refill && g.room(int(i)) {
			g.push(i)
		}
	}
	g.stranded = g.stranded[:0]
}

func (g *Gen) example(s string) {
	if len(g.ex) < 8 {
		g.ex = append(g.ex, s)
	}
}

// send fills the ready flows' windows: one GSO message per flow, all in
// one sendmmsg.
func (g *Gen) send(now int64) {
	guess, high := g.spec.Guess(time.Duration(now))
	if guess == spec.NoGuess {
		high = NoHigh
	}
	floor := g.chk.Floor()
	n := reqLen
	if g.hflow != nil {
		n = herdReqLen
	}
	if g.eflow != nil {
		n = erpcReqLen
	}
	budget := len(g.arena) / n
	if g.cfg.InFlight > 0 {
		budget = min(budget, g.cfg.InFlight-g.out)
	}
	nh, used := 0, 0
	last, lastSegs := int32(-1), 0 // the flow that opened message nh-1, and its segments
	for tries := g.rn; tries > 0 && nh < len(g.hdrs) && budget > 0; tries-- {
		fi := g.pop()
		// A flow that shares message nh-1's source, server and server QP
		// joins it (Config.Sources): its segments are numbered on from
		// that message's, for their ICRCs (the IPv4 ID).
		join := nh > 0 && lastSegs < maxSegs && g.joins(last, fi)
		start, k0 := used, 0
		if join {
			k0 = lastSegs
		}
		k := k0
		lim := min(maxSegs, k0+budget)
		switch {
		case g.eflow != nil:
			f, s := g.eflow[fi], &g.esnd[fi]
			for k < lim {
				slot, rn, ok := f.Send(now, floor)
				if !ok {
					break
				}
				s.put(g.arena[used:], slot, rn, k)
				used += n
				k++
			}
		case g.hflow != nil:
			f, s := g.hflow[fi], &g.hsnd[fi]
			for k < lim {
				pos, seq, ok := f.Send(now, floor)
				if !ok {
					break
				}
				s.put(g.arena[used:], pos, seq, k)
				used += n
				k++
			}
		default:
			f, s := g.flows[fi], &g.snd[fi]
			for k < lim {
				tag, ok := f.Send(now, high, floor)
				if !ok {
					break
				}
				s.put(g.arena[used:], uint32(tag)<<spec.LowBits|uint32(guess), k)
				used += n
				k++
			}
		}
		added := k - k0
		if added == 0 {
			g.stranded = append(g.stranded, fi) // full, or its next tag is quarantined: the expiry tick looks again
			continue
		}
		budget -= added
		g.out += added
		g.st.Sent += uint64(added)
		if !g.inBusy[fi] {
			g.inBusy[fi] = true
			g.busy = append(g.busy, fi)
		}
		if g.room(int(fi)) {
			g.push(fi)
		}
		if join {
			g.iovs[nh-1].SetLen(int(g.iovs[nh-1].Len) + used - start)
			g.hdrs[nh-1].Hdr.SetControllen(pktinfoLen + segLen)
			lastSegs = k
			continue
		}
		last, lastSegs = fi, k
		g.iovs[nh] = unix.Iovec{Base: &g.arena[start]}
		g.iovs[nh].SetLen(used - start)
		h := &g.hdrs[nh].Hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&g.dst[fi])), Namelen: unix.SizeofSockaddrInet4, Iov: &g.iovs[nh],
			Control: &g.ctrl[int(fi)*(pktinfoLen+segLen)]}
		h.SetIovlen(1)
		if k > 1 {
			h.SetControllen(pktinfoLen + segLen)
		} else {
			h.SetControllen(pktinfoLen)
		}
		nh++
	}
	for sent, spins := 0, 0; sent < nh; {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(g.fd), uintptr(unsafe.Pointer(&g.hdrs[sent])), uintptr(nh-sent), 0, 0, 0)
		g.st.Syscalls++
		switch errno {
		case 0:
			sent += int(n)
			g.st.TxMessages += uint64(n)
		case unix.EAGAIN, unix.ENOBUFS, unix.EINTR:
			// The socket buffer is full: wait for room, up to 10 ms (a
			// longer wait would stall the receive side). The requests
			// stay outstanding; those not sent are given up after the
			// timeout.
			g.st.SendWaits++
			if spins++; spins > 10 {
				for _, h := range g.hdrs[sent:nh] {
					g.st.SendErrors += uint64(h.Hdr.Iov.Len) / uint64(n)
				}
				return
			}
			pfd := [1]unix.PollFd{{Fd: int32(g.fd), Events: unix.POLLOUT}}
			unix.Poll(pfd[:], 1)
		default:
			g.st.SendErrors++
			sent++ // this message is lost, as on a network
		}
	}
}

// joins reports whether flow b's requests may join a GSO message of
// flow a's: same source, server address and server QP.
func (g *Gen) joins(a, b int32) bool {
	return g.src[a] == g.src[b] && g.dst[a] == g.dst[b] && g.dqp[a] == g.dqp[b]
}

// receive reads every datagram waiting (GRO on), up to a bound, and
// handles the answers in them.
func (g *Gen) receive(now int64, measure bool) {
	var batchMax uint64
	for round := 0; round < 8; round++ {
		for i := range g.dirty {
			h := &g.rhdrs[i].Hdr
			h.Namelen = unix.SizeofSockaddrInet4
			h.SetControllen(rxCtrlLen)
			h.Flags = 0
		}
		g.dirty = 0
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(g.fd), uintptr(unsafe.Pointer(&g.rhdrs[0])), rxMsgs, unix.MSG_DONTWAIT, 0, 0)
		g.st.Syscalls++
		if errno != 0 || n == 0 {
			break
		}
		g.dirty = int(n)
		g.st.RxDatagrams += uint64(n)
		for i := range int(n) {
			h := &g.rhdrs[i]
			total := int(h.Len)
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 || total == 0 {
				g.st.Malformed++
				continue
			}
			seg := groSize(g.rctrl[i*rxCtrlLen : i*rxCtrlLen+min(int(h.Hdr.Controllen), rxCtrlLen)])
			if seg <= 0 {
				seg = total
			}
			sa := &g.rnames[i]
			port := sa.Port<<8 | sa.Port>>8
			buf := g.rbufs[i][:total]
			for k, off := 0, 0; off < total; k, off = k+1, off+seg {
				if v := g.answer(now, buf[off:min(off+seg, total)], k, sa.Addr, port, measure); v > batchMax {
					batchMax = v
				}
			}
		}
		if int(n) < rxMsgs {
			break
		}
	}
	if batchMax != 0 {
		g.spec.Learn(time.Duration(now), batchMax)
	}
}

// groSize reads the UDP_GRO segment size from a datagram's control
// messages (0: none).
func groSize(b []byte) int {
	for len(b) >= unix.SizeofCmsghdr {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(cm.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return 0
		}
		if cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO && l >= unix.CmsgLen(2) {
			return int(*(*uint16)(unsafe.Pointer(&b[unix.SizeofCmsghdr])))
		}
		next := unix.CmsgSpace(l - unix.SizeofCmsghdr)
		if next >= len(b) {
			return 0
		}
		b = b[next:]
	}
	return 0
}

// answer handles one answer packet, segment k of a datagram from
// src:port, and returns its value (0 for none).
func (g *Gen) answer(now int64, b []byte, k int, src [4]byte, port uint16, measure bool) uint64 {
	if g.eflow != nil {
		return g.answerERPC(now, b, k, src, port, measure)
	}
	var a answer
	if !parseAnswer(b, &a) {
		g.st.Malformed++
		return 0
	}
	qpn := a.destQP
	if g.tgt.Kind == RawEcho {
		qpn = a.srcQP // our own request, sent back
	}
	fi := int(qpn - QPNBase)
	if qpn < QPNBase || fi >= g.nflows() {
		g.st.Malformed++
		return 0
	}
	if g.tgt.Kind != RawEcho {
		if !g.okFrom(fi, a.qkey, a.srcQP) {
			g.st.Forged++
			return 0
		}
		if !g.cfg.NoICRC && !g.rcv[fi].icrcOK(b, k, src, port) {
			g.st.BadICRC++
			return 0
		}
	}
	return g.match(now, fi, &a, measure)
}

// match matches a checked answer to its flow's request, and checks its
// value.
func (g *Gen) match(now int64, fi int, a *answer, measure bool) uint64 {
	if g.hflow != nil {
		return g.matchHERD(now, fi, a, measure)
	}
	f := g.flows[fi]
	imm := spec.Imm(a.imm)
	s, ok := f.Answer(now, imm.Tag())
	if !ok {
		g.st.Stale++
		return 0
	}
	g.out--
	g.push(int32(fi))
	var v uint64
	if g.tgt.Kind == Seqd {
		high := s.High
		if high == NoHigh {
			if a.payload == nil {
				g.st.Malformed++ // a confirmation of no guess
				return 0
			}
			high = 0
		}
		if a.payload != nil {
			g.st.SpecMisses++
		}
		var err error
		if v, _, err = spec.DecodeAnswer(imm, a.payload, high); err != nil {
			g.st.Malformed++
			return 0
		}
		if !g.checkValue(fi, s, v) {
			return 0
		}
		f.Accept(v)
		g.spec.Observe(time.Duration(s.At), v)
	}
	g.st.Answers++
	if measure {
		g.st.Measured++
		g.hist.RecordValue(max(now-s.At, 1))
	}
	return v
}

// matchHERD matches a HERD answer (immediate: position and sequence
// number; payload: the value) to its write, and checks the value.
func (g *Gen) matchHERD(now int64, fi int, a *answer, measure bool) uint64 {
	f := g.hflow[fi]
	pos, seq, v, err := spec.DecodeHERDAnswer(spec.HERDImm(a.imm), a.payload)
	if err != nil {
		g.st.Malformed++
		return 0
	}
	s, ok := f.Answer(pos, seq)
	if !ok {
		g.st.Stale++
		return 0
	}
	g.out--
	g.push(int32(fi))
	if !g.checkValue(fi, s, v) {
		return 0
	}
	f.Accept(v)
	g.st.Answers++
	if measure {
		g.st.Measured++
		g.hist.RecordValue(max(now-s.At, 1))
	}
	return v
}

// checkValue checks v, the value answering request s of flow fi, and
// counts a violation.
func (g *Gen) checkValue(fi int, s Sent, v uint64) bool {
	k, bad := g.chk.Check(s.Floor, s.FlowFloor, v)
	if !bad {
		return true
	}
	switch k {
	case verify.RealTime:
		g.st.RealTime++
		g.example(fmt.Sprintf("%v: flow %d got %d, not above %d received before its request was sent", k, fi, v, s.Floor))
	case verify.Regression:
		g.st.Regressions++
		g.example(fmt.Sprintf("%v: flow %d got %d, not above its own %d", k, fi, v, s.FlowFloor))
	}
	return false
}
