package darpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Defaults.
const (
	DefaultWindow     = 16
	DefaultMaxWindow  = 64
	DefaultMaxClients = 1024
	// DefaultCQDepth is the completions a worker's CQ holds: admission
	// keeps the sum over its connections of window receives plus
	// 4 × window answers in flight below it (about 400 connections of
	// window 16 per worker).
	DefaultCQDepth = 32768
	// DefaultSpin is how long an idle worker keeps polling before it
	// blocks on its CQ.
	DefaultSpin = 200 * time.Microsecond
)

// RC timing of the server's QPs (its answers): a lost answer is resent
// after about 17 ms, and a client that vanished fails the QP after about
// 8 × 17 ms.
const (
	rcTimeout  = 12 // 4.096 µs × 2^12 ≈ 17 ms
	rcRetryCnt = 7
	// cqSlack is room beyond the admission budget for the flushed
	// completions of connections being released.
	cqSlack = 1024
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("darpc: invalid config")

// Config configures a Server.
type Config struct {
	// Device, Oracle, Behind, Workers, Cores, Epoch and Logger, as every
	// CPU mode takes them (package internal/worker). The response-QP
	// fields are unused: answers leave on the clients' own connections.
	wk.Config
	// MaxWindow is the largest window granted (calls in flight per client
	// QP, receives posted per connection). Default 64, at most
	// spec.DaRPCMaxWindow.
	MaxWindow int
	// MaxClients is the most client QPs (connections) admitted at once.
	// Default 1024.
	MaxClients int
	// CQDepth is the completions one worker's CQ holds. Default 32768.
	CQDepth int
	// Spin is how long an idle worker keeps polling before it blocks on
	// its CQ; negative: it never blocks.
	Spin time.Duration
}

func (c Config) validate() (Config, error) {
	if err := c.Config.Fill(ErrConfig); err != nil {
		return c, err
	}
	err := wk.Default(ErrConfig, "MaxWindow", &c.MaxWindow, DefaultMaxWindow)
	if err == nil {
		err = wk.Default(ErrConfig, "MaxClients", &c.MaxClients, DefaultMaxClients)
	}
	if err == nil {
		err = wk.Default(ErrConfig, "CQDepth", &c.CQDepth, DefaultCQDepth)
	}
	if err != nil {
		return c, err
	}
	if c.MaxWindow > spec.DaRPCMaxWindow {
		return c, fmt.Errorf("%w: MaxWindow %d above the protocol's %d", ErrConfig, c.MaxWindow, spec.DaRPCMaxWindow)
	}
	if 5*c.MaxWindow > c.CQDepth {
		return c, fmt.Errorf("%w: CQDepth %d cannot hold one connection of window %d", ErrConfig, c.CQDepth, c.MaxWindow)
	}
	if c.MaxClients >= 1<<slotBits {
		return c, fmt.Errorf("%w: MaxClients %d", ErrConfig, c.MaxClients)
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	return c, nil
}

// Server is a running DaRPC data path.
type Server struct {
	wk.Pool[*worker] // the workers run while !stopped
	cfg              Config
	log              *slog.Logger
	ctx              context.Context // cancelled by Stop: wakes workers blocked on their CQ
	cancel           context.CancelFunc
	stopped          atomic.Bool

	mu       sync.Mutex
	sessions map[uint64]*session
	holders  wk.Held // which session holds each client QP
	nconns   int
	nextID   uint64
}

type session struct {
	id    uint64
	name  string
	conns []*conn
	qps   []handshake.Endpoint // the client's, as held in Server.held
}

var _ dataplane.Mode = (*Server)(nil)

// Start starts the DaRPC data path with the settings every mode takes
// (dataplane.Factory).
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	wc := wk.ConfigOf(c)
	wc.RespQPs, wc.QKey = 0, 0 // unused: answers leave on the clients' own connections
	return New(Config{Config: wc, MaxWindow: min(c.MaxWindow, spec.DaRPCMaxWindow), MaxClients: c.MaxClients})
}

// New creates the workers (a CQ each) and starts them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sessions: map[uint64]*session{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.Pool.Start(cfg.Device, cfg.Workers, func(i int) (*worker, error) { return newWorker(s, i) }); err != nil {
		s.Close()
		return nil, err
	}
	s.log.Info("darpc data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"max_window", cfg.MaxWindow, "epoch", cfg.Epoch)
	return s, nil
}

// Admit creates one RC QP per client QP, on the cluster of the least
// loaded worker, with window receives posted, and connects it to the
// client QP. Both directions of connection i start at the random PSN
// Grant.ConnPSNs[i].
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	if err := wk.CheckQPs(a.QPs); err != nil {
		return handshake.Grant{}, err
	}
	window := wk.Window(a.Window, DefaultWindow, s.cfg.MaxWindow)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return handshake.Grant{}, fmt.Errorf("%w: darpc stopped", dataplane.ErrUnavailable)
	}
	for _, w := range s.Workers {
		w.reclaim()
	}
	old, _ := wk.Replaced(s.sessions, replaces, s.cfg.Epoch)
	have, oldID := s.nconns, uint64(0)
	if old != nil {
		have, oldID = have-len(old.conns), old.id
	}
	if have+len(a.QPs) > s.cfg.MaxClients {
		return handshake.Grant{}, fmt.Errorf("%w: %d client QPs admitted, the maximum is %d", dataplane.ErrNoCapacity, have, s.cfg.MaxClients)
	}
	if err := s.holders.Check(a.QPs, oldID); err != nil {
		return handshake.Grant{}, fmt.Errorf("darpc: %w", err)
	}
	sess := &session{name: a.Name}
	g := handshake.Grant{Epoch: s.cfg.Epoch, Window: window}
	for i, q := range a.QPs {
		w := s.leastLoaded(window)
		if w == nil {
			s.drop(sess)
			return handshake.Grant{}, fmt.Errorf("%w: no worker has room for a connection of window %d", dataplane.ErrNoCapacity, window)
		}
		psn := verbs.RandomPSN()
		c, err := w.admit(q, window, psn)
		if err != nil {
			s.drop(sess)
			return handshake.Grant{}, fmt.Errorf("qps[%d]: %w", i, err)
		}
		sess.conns = append(sess.conns, c)
		g.ServerConnQPs = append(g.ServerConnQPs, handshake.Endpoint{Addr: c.qp.Address(), QPN: c.qp.QPN()})
		g.ConnPSNs = append(g.ConnPSNs, psn)
	}
	if old != nil {
		s.drop(old)
		delete(s.sessions, old.id)
	}
	s.nextID++
	sess.id = s.nextID
	g.Session = sess.id
	s.sessions[sess.id] = sess
	s.nconns += len(sess.conns)
	sess.qps = slices.Clone(a.QPs)
	if s.holders == nil {
		s.holders = wk.Held{}
	}
	s.holders.Add(sess.qps, sess.id)
	for _, w := range s.Workers {
		w.publish()
	}
	s.log.Debug("darpc client admitted", "session", sess.id, "name", a.Name, "qps", len(a.QPs), "window", window)
	return g, nil
}

// leastLoaded picks the worker a new connection of window joins: the one
// whose CQ has room, with the fewest consecutive busy polls (DaRPC's
// load measure, coarsened), then the fewest connections. Called with
// s.mu held.
func (s *Server) leastLoaded(window int) *worker {
	var best *worker
	var bestLoad uint64
	for _, w := range s.Workers {
		if w.cqUsed+5*window > s.cfg.CQDepth || len(w.free) == 0 {
			continue
		}
		load := w.busy.Load() >> 6
		if best == nil || load < bestLoad || (load == bestLoad && w.nconns < best.nconns) {
			best, bestLoad = w, load
		}
	}
	return best
}

// drop releases the connections of sess. Called with s.mu held.
func (s *Server) drop(sess *session) {
	s.holders.Remove(sess.qps, sess.id)
	for _, c := range sess.conns {
		c.w.release(c)
	}
	if _, ok := s.sessions[sess.id]; ok {
		s.nconns -= len(sess.conns)
	}
	for _, w := range s.Workers {
		w.publish()
	}
}

// Release ends a session: its QPs move to ERR at once and are destroyed
// once their worker can no longer touch them.
func (s *Server) Release(ctx context.Context, ref handshake.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := wk.Lookup(s.sessions, ref, s.cfg.Epoch, "darpc session")
	if err != nil {
		return err
	}
	s.drop(sess)
	delete(s.sessions, ref.ID)
	for _, w := range s.Workers {
		w.reclaim()
	}
	return nil
}

// Stats sums the workers' counters.
func (s *Server) Stats() dataplane.Stats {
	st := wk.Sum(s.Workers)
	s.mu.Lock()
	st.Sessions = len(s.sessions)
	s.mu.Unlock()
	var malformed, refused, flushed, unknown uint64
	for _, w := range s.Workers {
		malformed += w.own.malformed.Load()
		refused += w.own.refused.Load()
		flushed += w.own.flushed.Load()
		unknown += w.own.unknown.Load()
	}
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "malformed_total", Value: malformed, Help: "Call messages that did not decode, or asked for more than the window."},
		dataplane.Counter{Name: "refused_total", Value: refused, Help: "Call messages answered with a refusal (no values): the client sends them again."},
		dataplane.Counter{Name: "flushed_total", Value: flushed, Help: "Receives flushed by a connection moving to the error state."},
		dataplane.Counter{Name: "unknown_total", Value: unknown, Help: "Completions of connections already released."},
	)
	return st
}

// Stop stops the workers and moves every QP to ERR: late calls get no
// answer. Every value came from the oracle, so high is 0.
func (s *Server) Stop() (uint64, error) {
	if s.Pool.Stop(&s.mu, &s.stopped, s.cancel, nil) {
		s.mu.Lock() // admission's lock: a release in flight may touch the QPs
		for _, w := range s.Workers {
			w.toErr()
		}
		s.mu.Unlock()
		s.log.Info("darpc data path stopped")
	}
	return 0, nil
}

// Close stops the server and releases every verbs resource.
func (s *Server) Close() error {
	s.Stop()
	s.Pool.CloseOnce(&s.mu, func() { s.sessions = map[uint64]*session{} })
	return nil
}
