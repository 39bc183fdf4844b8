package atomics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Leaser is the oracle as this mode uses it: Claim as everywhere, and
// ClaimWait to wait for persistence when taking the first lease.
type Leaser interface {
	Claim(n int) (first uint64, err error)
	ClaimWait(ctx context.Context, n int) (first uint64, err error)
}

// Errors.
var (
	ErrConfig    = errors.New("atomics: invalid config")
	ErrClosed    = fmt.Errorf("atomics: server stopped: %w", dataplane.ErrUnavailable)
	ErrArgument  = fmt.Errorf("atomics: %w", dataplane.ErrInvalidArgument)
	ErrNoSession = fmt.Errorf("atomics: %w", dataplane.ErrUnknownSession)
	ErrFenced    = fmt.Errorf("atomics: fenced until the lease is renewed: %w", dataplane.ErrUnavailable)
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
	Epoch  uint64
	Logger *slog.Logger
}

func (c Config) validate() (Config, error) {
	if c.Device == nil || c.Oracle == nil {
		return c, fmt.Errorf("%w: Device and Oracle are required", ErrConfig)
	}
	if c.Block == 0 {
		c.Block = DefaultBlock
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

	leaseHi atomic.Uint64 // last value of the lease: every value <= it is below the mark
	fenced  atomic.Bool
	stopped atomic.Bool
	high    uint64 // set by Stop

	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	sessions map[uint64][]verbs.QP
	nqps     int
	nextID   uint64
	stopOnce sync.Once
	closed   bool

	renewals, fences atomic.Uint64
}

var _ dataplane.Mode = (*Server)(nil)

// Start starts the atomics data path (dataplane.Factory): its oracle
// must be a Leaser (the oracle is).
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	l, ok := c.Oracle.(Leaser)
	if !ok {
		return nil, fmt.Errorf("%w: the oracle %T cannot wait for a lease", ErrConfig, c.Oracle)
	}
	return New(ctx, Config{Device: c.Device, Oracle: l, Block: c.AtomicsBlock, MaxQPs: c.MaxClients * 16,
		Epoch: c.Epoch, Logger: c.Logger})
}

// New takes the counter over from the oracle (a first lease) and starts
// the lease monitor.
func New(ctx context.Context, cfg Config) (s *Server, err error) {
	if cfg, err = cfg.validate(); err != nil {
		return nil, err
	}
	s = &Server{cfg: cfg, log: cfg.Logger, sessions: map[uint64][]verbs.QP{}, stop: make(chan struct{}), done: make(chan struct{})}
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
	if s.mr, err = s.pd.RegMR(spec.CounterLen, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic); err != nil {
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
	s.leaseHi.Store(first + uint64(cfg.Block) - 1)
	go s.monitor()
	s.log.Info("atomics data path up", "first", first, "lease_hi", s.leaseHi.Load(), "epoch", cfg.Epoch)
	return s, nil
}

// Epoch identifies this server run.
func (s *Server) Epoch() uint64 { return s.cfg.Epoch }

// Next is the value the next FETCH_AND_ADD returns.
func (s *Server) Next() uint64 { return s.load() }

// Admit creates one RC QP per client QP (a.QPs), connected to it, with
// remote atomic access to the counter. A session replaces names is
// released first.
func (s *Server) Admit(ctx context.Context, a dataplane.Admission, replaces dataplane.SessionRef) (dataplane.Grant, error) {
	var no dataplane.Grant
	if len(a.ConnQPs) != 0 {
		return no, fmt.Errorf("%w: atomics takes RC QPs in qps, not conn_qps", dataplane.ErrFailedPrecondition)
	}
	if len(a.QPs) == 0 {
		return no, fmt.Errorf("%w: no queue pairs", ErrArgument)
	}
	if err := dataplane.ReleaseReplaced(ctx, s, replaces); err != nil {
		return no, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return no, ErrClosed
	}
	if s.fenced.Load() {
		return no, ErrFenced
	}
	if s.nqps+len(a.QPs) > s.cfg.MaxQPs {
		return no, fmt.Errorf("%w: %d QPs admitted, the maximum is %d", ErrArgument, s.nqps, s.cfg.MaxQPs)
	}
	var mine []verbs.QP
	g := dataplane.Grant{RemoteAddr: []uint64{s.mr.Addr()}, RKey: []uint32{s.mr.RKey()}, Epoch: s.cfg.Epoch,
		Window: a.Window, High: s.load()}
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
		g.ServerConnQPs = append(g.ServerConnQPs, dataplane.Endpoint{Addr: qp.Address(), QPN: qp.QPN()})
		g.Assignment = append(g.Assignment, uint32(i))
	}
	s.nextID++
	g.Session = s.nextID
	s.sessions[g.Session] = mine
	s.nqps += len(mine)
	s.log.Info("atomics client admitted", "session", g.Session, "name", a.Name, "qps", len(a.QPs))
	return g, nil
}

// Release closes a session's QPs.
func (s *Server) Release(ctx context.Context, r dataplane.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	qps, ok := s.sessions[r.ID]
	if !ok {
		return fmt.Errorf("%w: %d", ErrNoSession, r.ID)
	}
	delete(s.sessions, r.ID)
	s.nqps -= len(qps)
	for _, qp := range qps {
		qp.Close()
	}
	return nil
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

// monitor renews the lease ahead of the counter and fences before the
// counter can pass it.
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
		next := s.load() // values below next may be out
		hi := s.leaseHi.Load()
		if next > hi || hi-next < block/2 {
			if first, err := s.cfg.Oracle.Claim(s.cfg.Block); err == nil {
				// first > every value the oracle saw; the gap up to it
				// is below the mark too and never handed out by the
				// oracle, so the NIC may run straight through it.
				s.leaseHi.Store(first + block - 1)
				s.renewals.Add(1)
				if s.fenced.Load() {
					s.fenced.Store(false)
					s.log.Info("atomics: lease renewed, admitting again", "lease_hi", first+block-1)
				}
				continue
			}
		}
		if next+uint64(s.cfg.FenceMargin) > hi && !s.fenced.Load() {
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
			s.log.Warn("atomics: fenced: the counter came within the margin of the lease; clients re-admit once it is renewed",
				"next", next, "lease_hi", hi)
		}
	}
}

// Stop moves every QP to ERR (late requests get no answer, and no atomic
// runs after it returns), stops the monitor, and returns the highest value
// the mode could have handed out. Stop is idempotent.
func (s *Server) Stop() (high uint64, err error) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped.Store(true)
		s.allToErr()
		s.mu.Unlock()
		close(s.stop)
		<-s.done
		if s.word != nil {
			s.high = s.load() - 1
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
	Sessions         int
	Fenced           bool
}

// Lease returns a snapshot of the lease.
func (s *Server) Lease() LeaseStats {
	st := LeaseStats{Next: s.load(), LeaseHi: s.leaseHi.Load(), Renewals: s.renewals.Load(), Fences: s.fences.Load()}
	st.Sessions, st.Fenced = s.Sessions(), s.fenced.Load()
	return st
}

// Stats reports the sessions, the counter and the lease. Its Counters
// are the metrics seqd_atomics_*.
func (s *Server) Stats() dataplane.Stats {
	l := s.Lease()
	return dataplane.Stats{Sessions: l.Sessions, Current: l.Next - 1, Counters: []dataplane.Counter{
		{Name: "lease_renewals_total", Help: "Leases claimed from the oracle ahead of the NIC counter.", Value: l.Renewals},
		{Name: "fences_total", Help: "Times every QP was moved to ERR because the counter neared the lease's end.", Value: l.Fences},
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
