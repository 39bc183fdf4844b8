package atomics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Leaser is the oracle as this mode uses it: a dataplane.Claimer that
// can also wait for persistence (ClaimWait), to take the first lease.
type Leaser interface {
	dataplane.Claimer
	ClaimWait(ctx context.Context, n int) (first uint64, err error)
}

// Errors.
var (
	ErrConfig    = errors.New("atomics: invalid config")
	ErrClosed    = fmt.Errorf("atomics: server stopped: %w", dataplane.ErrUnavailable)
	ErrArgument  = fmt.Errorf("atomics: %w", dataplane.ErrInvalidArgument)
	ErrNoSession = fmt.Errorf("atomics: %w", dataplane.ErrUnknownSession)
	ErrNoRoom    = fmt.Errorf("atomics: %w", dataplane.ErrNoCapacity)
	ErrFenced    = fmt.Errorf("atomics: fenced until the lease is renewed: %w", dataplane.ErrUnavailable)
	// ErrUntrusted refuses a client on a provider that cannot hold it to
	// fetch-and-add of one (verbs.AtomicPolicer) when its identity is
	// not in Config.Trusted.
	ErrUntrusted = fmt.Errorf("atomics: this provider lets a client move the counter anywhere, and only trusted identities are admitted: %w",
		dataplane.ErrFailedPrecondition)
)

// Defaults.
const (
	DefaultBlock  = 1 << 16
	DefaultMaxQPs = 1024
)

// Config configures a Server.
type Config struct {
	Device verbs.Device // required
	Oracle Leaser       // required
	// Block is how many values one lease claims (at most the oracle's
	// MaxBatch). Default 1<<16.
	Block int
	// FenceMargin: the monitor fences when fewer values than this are left
	// in the lease. Default Block/4.
	FenceMargin int
	// Interval is the monitor period. Default spec.LeaseInterval.
	Interval time.Duration
	// MaxQPs is the most client QPs admitted at once. Default 1024.
	MaxQPs int
	// MaxWindow is the most fetch-and-adds a client QP is granted to keep
	// outstanding. Default 1024 (the client's bound).
	MaxWindow int
	// Trusted are the client identities (handshake.Admission.Identities)
	// admitted when the provider cannot refuse an atomic other than the
	// fetch-and-add of one (it offers no verbs.AtomicPolicer: a NIC).
	// With such a provider and no identity listed, nobody is admitted.
	// A provider that enforces the policy admits every client.
	Trusted []string
	Epoch   uint64
	Logger  *slog.Logger
}

func (c Config) validate() (Config, error) {
	if c.Device == nil || c.Oracle == nil {
		return c, fmt.Errorf("%w: Device and Oracle are required", ErrConfig)
	}
	if c.Block == 0 {
		c.Block = DefaultBlock
	}
	if c.MaxWindow <= 0 {
		c.MaxWindow = 1024
	}
	if c.FenceMargin == 0 {
		c.FenceMargin = c.Block / 4
	}
	if c.Interval == 0 {
		c.Interval = spec.LeaseInterval
	}
	if c.MaxQPs == 0 {
		c.MaxQPs = DefaultMaxQPs
	}
	if c.Block < 4 || c.FenceMargin < 1 || c.FenceMargin >= c.Block/2 || c.Interval < 0 || c.MaxQPs < 0 {
		return c, fmt.Errorf("%w: Block %d, FenceMargin %d (want 1..Block/2), Interval %v", ErrConfig, c.Block, c.FenceMargin, c.Interval)
	}
	if c.Epoch == 0 {
		c.Epoch = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Server is a running fetch-and-add data path.
type Server struct {
	cfg  Config
	log  *slog.Logger
	pd   verbs.PD
	cq   verbs.CQ
	mr   verbs.MR
	word *uint64
	be   bool // the responder's atomic byte order is big endian
	// policed is the counter's region when the provider enforces the
	// atomic policy (fetch-and-add of one, up to the lease's end); nil
	// when it cannot, and only trusted identities are admitted.
	policed verbs.AtomicMR
	trusted map[string]bool

	leaseHi atomic.Uint64 // last value of the lease: every value <= it is below the mark
	// top is the highest value the word was seen able to hand out (the
	// monitor's readings, and what a breach found): Stop reports at least
	// it, whatever the word holds then.
	top     atomic.Uint64
	fenced  atomic.Bool
	stopped atomic.Bool
	high    uint64 // set by Stop

	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	sessions map[uint64][]verbs.QP
	// holders: which session holds each client QP; eps: each session's.
	holders  wk.Held
	eps      map[uint64][]handshake.Endpoint
	nqps     int
	nextID   uint64
	stopOnce sync.Once
	closed   bool

	renewals, fences, untrusted atomic.Uint64
	overruns, rewinds           atomic.Uint64

	// The monitor's own state (its goroutine only).
	seen   uint64 // the last reading of the word
	broken bool   // fenced after a breach: the word restarts above floor
	floor  uint64
}

var _ dataplane.Mode = (*Server)(nil)

// Start starts the atomics data path (dataplane.Factory): its oracle
// must be a Leaser (the oracle is).
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	l, ok := c.Oracle.(Leaser)
	if !ok {
		return nil, fmt.Errorf("%w: the oracle %T cannot wait for a lease", ErrConfig, c.Oracle)
	}
	return New(ctx, Config{Device: c.Device, Oracle: l, Block: c.AtomicsBlock, MaxQPs: c.MaxClients * 16, MaxWindow: c.MaxWindow,
		Trusted: c.AtomicsTrusted, Epoch: c.Epoch, Logger: c.Logger})
}

// New takes the counter over from the oracle (a first lease) and starts
// the lease monitor.
func New(ctx context.Context, cfg Config) (s *Server, err error) {
	if cfg, err = cfg.validate(); err != nil {
		return nil, err
	}
	s = &Server{cfg: cfg, log: cfg.Logger, sessions: map[uint64][]verbs.QP{}, stop: make(chan struct{}), done: make(chan struct{}),
		trusted: map[string]bool{}}
	for _, id := range cfg.Trusted {
		s.trusted[id] = true
	}
	defer func() {
		if err != nil {
			close(s.done)
			s.Close()
		}
	}()
	if s.pd, err = cfg.Device.AllocPD(); err != nil {
		return nil, fmt.Errorf("atomics: protection domain: %w", err)
	}
	if s.cq, err = cfg.Device.CreateCQ(64); err != nil {
		return nil, fmt.Errorf("atomics: CQ: %w", err)
	}
	// The policy's limit starts at 0: no atomic runs before the first
	// lease is taken (no QP exists yet either).
	if p, ok := s.pd.(verbs.AtomicPolicer); ok {
		if s.policed, err = p.RegAtomicMR(spec.CounterLen, verbs.AtomicPolicy{FetchAdd: spec.FetchAddDelta}); err != nil {
			return nil, fmt.Errorf("atomics: counter region with an atomic policy: %w", err)
		}
		s.mr = s.policed
	} else if s.mr, err = s.pd.RegMR(spec.CounterLen, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic); err != nil {
		return nil, fmt.Errorf("atomics: counter region: %w", err)
	}
	b := s.mr.Bytes()
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("atomics: counter region is not 8-byte aligned")
	}
	s.word = (*uint64)(unsafe.Pointer(&b[0]))
	s.be = cfg.Device.Attr().AtomicBigEndian
	first, err := cfg.Oracle.ClaimWait(ctx, cfg.Block)
	if err != nil {
		return nil, fmt.Errorf("atomics: first lease: %w", err)
	}
	// The CPU writes the word once, before any QP exists: the NIC owns it
	// from here on.
	atomic.StoreUint64(s.word, s.order(first))
	s.seen = first
	s.top.Store(first - 1)
	s.setLease(first + uint64(cfg.Block) - 1)
	go s.monitor()
	if s.policed == nil {
		s.log.Warn("atomics: the provider cannot refuse an atomic other than fetch-and-add of one: only trusted identities are admitted",
			"trusted", cfg.Trusted)
	}
	s.log.Info("atomics data path up", "first", first, "lease_hi", s.leaseHi.Load(), "epoch", cfg.Epoch,
		"policed", s.policed != nil)
	return s, nil
}

// Epoch identifies this server run.
func (s *Server) Epoch() uint64 { return s.cfg.Epoch }

// Next is the value the next FETCH_AND_ADD returns.
func (s *Server) Next() uint64 { return s.load() }

// Admit creates one RC QP per client QP (a.QPs), connected to it, with
// remote atomic access to the counter. A session replaces names (of
// this epoch) is released once the admission is checked, its QPs
// counted as free.
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	var no handshake.Grant
	if len(a.ConnQPs) != 0 {
		return no, fmt.Errorf("%w: atomics takes RC QPs in qps, not conn_qps", dataplane.ErrFailedPrecondition)
	}
	if len(a.QPs) == 0 {
		return no, fmt.Errorf("%w: no queue pairs", ErrArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return no, ErrClosed
	}
	if s.fenced.Load() {
		return no, ErrFenced
	}
	if s.policed == nil && !s.trusts(a.Identities) {
		s.untrusted.Add(1)
		return no, fmt.Errorf("%w: client %q, identities %q", ErrUntrusted, a.Name, a.Identities)
	}
	old, replacing := wk.Replaced(s.sessions, replaces, s.cfg.Epoch)
	var oldID uint64
	if replacing {
		oldID = replaces.ID
	}
	if have := s.nqps - len(old); have+len(a.QPs) > s.cfg.MaxQPs {
		return no, fmt.Errorf("%w: %d QPs admitted, the maximum is %d", ErrNoRoom, have, s.cfg.MaxQPs)
	}
	if err := s.holders.Check(a.QPs, oldID); err != nil {
		return no, fmt.Errorf("atomics: %w", err)
	}
	if replacing {
		s.release(replaces.ID, old)
	}
	var mine []verbs.QP
	g := handshake.Grant{RemoteAddr: []uint64{s.mr.Addr()}, RKey: []uint32{s.mr.RKey()}, Epoch: s.cfg.Epoch,
		Window: wk.Window(a.Window, 1, s.cfg.MaxWindow), High: s.load()}
	for i, q := range a.QPs {
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err == nil {
			psn := verbs.RandomPSN()
			g.ConnPSNs = append(g.ConnPSNs, psn)
			err = verbs.Connect(qp, verbs.ConnectAttr{Remote: q.Addr, RemoteQPN: q.QPN, RQPSN: psn, SQPSN: verbs.RandomPSN(),
				Access: verbs.AccessRemoteAtomic})
			if err != nil {
				qp.Close()
			}
		}
		if err != nil {
			for _, x := range mine {
				x.Close()
			}
			return no, fmt.Errorf("%w: qps[%d]: %v", ErrArgument, i, err)
		}
		mine = append(mine, qp)
		g.ServerConnQPs = append(g.ServerConnQPs, handshake.Endpoint{Addr: qp.Address(), QPN: qp.QPN()})
		g.Assignment = append(g.Assignment, uint32(i))
	}
	s.nextID++
	g.Session = s.nextID
	s.sessions[g.Session] = mine
	if s.holders == nil {
		s.holders, s.eps = wk.Held{}, map[uint64][]handshake.Endpoint{}
	}
	s.eps[g.Session] = slices.Clone(a.QPs)
	s.holders.Add(a.QPs, g.Session)
	s.nqps += len(mine)
	s.log.Debug("atomics client admitted", "session", g.Session, "name", a.Name, "qps", len(a.QPs))
	return g, nil
}

// Release closes a session's QPs.
func (s *Server) Release(ctx context.Context, r handshake.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	qps, ok := s.sessions[r.ID]
	if !ok || r.Epoch != s.cfg.Epoch {
		return fmt.Errorf("%w: %d of epoch %d", ErrNoSession, r.ID, r.Epoch)
	}
	s.release(r.ID, qps)
	return nil
}

// release closes session id's QPs. Called with s.mu held.
func (s *Server) release(id uint64, qps []verbs.QP) {
	delete(s.sessions, id)
	s.holders.Remove(s.eps[id], id)
	delete(s.eps, id)
	s.nqps -= len(qps)
	for _, qp := range qps {
		qp.Close()
	}
}

// Sessions is the number of admitted sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// allToErr moves every admitted QP to ERR. Once it returns no atomic runs
// on the counter. Called with s.mu held.
func (s *Server) allToErr() {
	for _, qps := range s.sessions {
		for _, qp := range qps {
			qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}
	}
}

// trusts reports whether one of ids is a trusted identity.
func (s *Server) trusts(ids []string) bool {
	for _, id := range ids {
		if s.trusted[id] {
			return true
		}
	}
	return false
}

// setLease makes hi the lease's last value: the last value the policy
// lets a FETCH_AND_ADD return, and the monitor's bound.
func (s *Server) setLease(hi uint64) {
	if s.policed != nil {
		s.policed.SetAtomicLimit(hi)
	}
	s.leaseHi.Store(hi)
}

// reading is what the monitor makes of one reading of the counter word.
type reading int

const (
	readFine    reading = iota // inside the lease, with room
	readRenew                  // less than half a block left: renew
	readLow                    // within the fence margin: renew, or fence
	readOverrun                // values beyond the lease may be out: fence
	readRewound                // below an earlier reading: fence
)

// assess judges next, the word (the value the next FETCH_AND_ADD
// returns), against seen, the monitor's previous reading, and hi, the
// lease's last value. Fetch-and-adds of one only move the word up, to
// hi+1 at most before the monitor renews; anything else is a client that
// broke protocol on a provider that could not refuse it, or a rate
// beyond the one the fence margin assumes.
func assess(next, seen, hi, block, margin uint64) reading {
	switch {
	case next < seen:
		return readRewound
	case next-1 > hi:
		return readOverrun
	case next+margin > hi:
		return readLow
	case hi-next < block/2:
		return readRenew
	}
	return readFine
}

// monitor renews the lease ahead of the counter, fences before the
// counter can pass it, and fences at once when it finds the counter
// moved backward or beyond the lease.
func (s *Server) monitor() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	block := uint64(s.cfg.Block)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.broken {
			s.recoverBreach()
			continue
		}
		next := s.load() // values below next may be out
		hi := s.leaseHi.Load()
		r := assess(next, s.seen, hi, block, uint64(s.cfg.FenceMargin))
		if next > s.seen {
			s.seen = next
			s.raiseTop(next - 1)
		}
		switch r {
		case readRewound, readOverrun:
			s.breach(r, next, hi)
		case readRenew, readLow:
			if first, err := s.cfg.Oracle.Claim(s.cfg.Block); err == nil {
				// first > every value the oracle saw; the gap up to it
				// is below the mark too and never handed out by the
				// oracle, so the NIC may run straight through it.
				s.setLease(first + block - 1)
				s.renewals.Add(1)
				if s.fenced.Load() {
					s.fenced.Store(false)
					s.log.Info("atomics: lease renewed, admitting again", "lease_hi", first+block-1)
				}
			} else if r == readLow && !s.fenced.Load() {
				s.fence()
				s.log.Warn("atomics: fenced: the counter came within the margin of the lease; clients re-admit once it is renewed",
					"next", next, "lease_hi", hi)
			}
		}
	}
}

// fence moves every QP to ERR and drops every session: once it returns
// no atomic runs on the counter, and none will until a session is
// admitted again, which waits for the fence to lift.
func (s *Server) fence() {
	s.mu.Lock()
	s.fenced.Store(true)
	s.allToErr()
	for id, qps := range s.sessions {
		for _, qp := range qps {
			qp.Close()
		}
		delete(s.sessions, id)
	}
	s.nqps = 0
	s.mu.Unlock()
	s.fences.Add(1)
}

// breach fences after a reading no fetch-and-add of one could produce.
// Values up to the highest the word reached may be out, some of them
// beyond the lease, so the counter restarts only above all of them: the
// oracle is floored there (when it can be), and recoverBreach moves the
// word to a lease above it before admitting again.
func (s *Server) breach(r reading, next, hi uint64) {
	s.fence()
	// Adds that ran between the reading and the fence count too: the
	// word is still now.
	now := s.load()
	s.floor = max(s.seen, next, now, hi+1) - 1
	s.raiseTop(s.floor)
	s.broken = true
	reason := "overrun"
	if r == readRewound {
		reason = "rewind"
		s.rewinds.Add(1)
	} else {
		s.overruns.Add(1)
	}
	if f, ok := s.cfg.Oracle.(interface{ Floor(uint64) error }); ok {
		if err := f.Floor(s.floor); err != nil {
			s.log.Error("atomics: cannot floor the oracle above the counter", "floor", s.floor, "err", err)
		}
	}
	s.log.Error("atomics: fenced: the counter moved as no fetch-and-add of one can; a client broke protocol on a provider that could not refuse it, or the fence margin's rate was exceeded",
		"reason", reason, "next", next, "now", now, "seen", s.seen, "lease_hi", hi, "restart_above", s.floor)
}

// recoverBreach takes a lease above the breach's floor and restarts the
// word at its first value. No QP exists while it runs, so the CPU owns
// the word.
func (s *Server) recoverBreach() {
	first, err := s.cfg.Oracle.Claim(s.cfg.Block)
	if err != nil || first <= s.floor {
		return // persistence behind, or an oracle that cannot be floored: wait
	}
	atomic.StoreUint64(s.word, s.order(first))
	s.seen = first
	s.setLease(first + uint64(s.cfg.Block) - 1)
	s.renewals.Add(1)
	s.broken = false
	s.fenced.Store(false)
	s.log.Info("atomics: counter restarted above the breach, admitting again", "first", first, "lease_hi", s.leaseHi.Load())
}

// raiseTop raises top to v.
func (s *Server) raiseTop(v uint64) {
	for {
		t := s.top.Load()
		if v <= t || s.top.CompareAndSwap(t, v) {
			return
		}
	}
}

// Stop moves every QP to ERR (late requests get no answer, and no atomic
// runs after it returns), stops the monitor, and returns the highest value
// the mode could have handed out: the word's, or the highest the monitor
// saw if the word went back. Stop is idempotent.
func (s *Server) Stop() (high uint64, err error) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped.Store(true)
		s.allToErr()
		s.mu.Unlock()
		close(s.stop)
		<-s.done
		if s.word != nil {
			s.high = s.top.Load()
			if w := s.load(); w > 0 {
				s.high = max(s.high, w-1)
			}
		}
		s.log.Info("atomics data path stopped", "high", s.high, "lease_hi", s.leaseHi.Load())
	})
	return s.high, nil
}

// Close stops the server and releases its verbs resources.
func (s *Server) Close() error {
	if s.word != nil {
		s.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for id, qps := range s.sessions {
		for _, qp := range qps {
			qp.Close()
		}
		delete(s.sessions, id)
	}
	wk.CloseAll(s.mr, s.cq, s.pd)
	return nil
}

// LeaseStats are the mode's lease at one moment.
type LeaseStats struct {
	Next, LeaseHi    uint64
	Renewals, Fences uint64
	// Top is the highest value the monitor saw the word able to hand out.
	Top uint64
	// Overruns and Rewinds count breaches: fences after the word was
	// found beyond the lease or below an earlier reading.
	Overruns, Rewinds uint64
	// Refused counts atomics the provider refused under the policy
	// (Policed); Untrusted, admissions refused without it.
	Refused, Untrusted uint64
	Sessions           int
	Fenced, Policed    bool
}

// Lease returns a snapshot of the lease.
func (s *Server) Lease() LeaseStats {
	st := LeaseStats{Next: s.load(), LeaseHi: s.leaseHi.Load(), Renewals: s.renewals.Load(), Fences: s.fences.Load(),
		Top: s.top.Load(), Overruns: s.overruns.Load(), Rewinds: s.rewinds.Load(), Untrusted: s.untrusted.Load(),
		Policed: s.policed != nil}
	if s.policed != nil {
		st.Refused = s.policed.AtomicRefused()
	}
	st.Sessions, st.Fenced = s.Sessions(), s.fenced.Load()
	return st
}

// Stats reports the sessions, the counter and the lease. Its Counters
// are the metrics seqd_atomics_*.
func (s *Server) Stats() dataplane.Stats {
	l := s.Lease()
	cur := l.Top
	if l.Next > 0 {
		cur = max(cur, l.Next-1)
	}
	const breachHelp = "Fences after the counter was found beyond the lease (overrun) or below an earlier reading (rewind): a client broke protocol on a provider that could not refuse it."
	return dataplane.Stats{Sessions: l.Sessions, Current: cur, Counters: []dataplane.Counter{
		{Name: "lease_renewals_total", Help: "Leases claimed from the oracle ahead of the NIC counter.", Value: l.Renewals},
		{Name: "fences_total", Help: "Times every QP was moved to ERR because the counter neared the lease's end or moved as no fetch-and-add of one can.", Value: l.Fences},
		{Name: "breaches_total", Help: breachHelp, Reason: "overrun", Value: l.Overruns},
		{Name: "breaches_total", Help: breachHelp, Reason: "rewind", Value: l.Rewinds},
		{Name: "refused_atomics_total", Help: "Atomics the provider refused because they were not a fetch-and-add of one: another add, a compare-and-swap, or an add that would wrap (the client's QP went to ERR).", Value: l.Refused},
		{Name: "untrusted_total", Help: "Admissions refused because the provider cannot refuse other atomics and the client's identity is not trusted.", Value: l.Untrusted},
	}}
}

// order converts between host order and the responder's atomic order.
func (s *Server) order(v uint64) uint64 {
	if s.be {
		return bits.ReverseBytes64(v)
	}
	return v
}

// load reads the counter word (the CPU only reads it while the NIC owns it).
func (s *Server) load() uint64 { return s.order(atomic.LoadUint64(s.word)) }
