package fasst

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/verbs"
)

// Server is a running FaSST data path.
type Server struct {
	// The protection domain, the clients' address handles, the workers
	// and their response QPs (AnswerQPs: answers come only from these).
	wk.Pool[*worker]
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // cancelled by Stop: wakes workers blocked in CQ.Wait
	cancel context.CancelFunc
	start  time.Time

	stopped atomic.Bool

	mu        sync.Mutex
	sessions  map[uint64]*session
	nsessions atomic.Int64
	nextID    uint64
	rr        int
}

type session struct {
	id     uint64
	name   string
	window int
	peers  []*peer
	worker []int
}

var _ dataplane.Mode = (*Server)(nil)

// Start creates the workers' queue pairs and starts them (a
// dataplane.Factory).
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	return New(Config{Config: wk.ConfigOf(c), MaxWindow: c.MaxWindow, MaxClients: c.MaxClients, Format: c.Format})
}

// New creates the workers' queue pairs and starts them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.Start(cfg.Device, cfg.Workers, func(i int) (*worker, error) { return newWorker(s, i) }); err != nil {
		s.Close()
		return nil, fmt.Errorf("fasst: %w", err)
	}
	s.log.Info("fasst data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"resp_qps", cfg.RespQPs, "max_window", cfg.MaxWindow, "epoch", cfg.Epoch)
	return s, nil
}

// Admit admits a session: each client QP goes to a worker (round-robin),
// whose shared receive queue has room for the window of every QP
// admitted to it. The client QPs send to their worker's request QP
// (Grant.ServerQPs[Grant.Assignment[i]]) with Grant.QKey; answers come
// from Grant.AnswerQPs with Grant.AnswerQKey, the session's own.
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	if s.stopped.Load() {
		return handshake.Grant{}, fmt.Errorf("%w: fasst: stopping", dataplane.ErrUnavailable)
	}
	if len(a.QPs) == 0 {
		return handshake.Grant{}, fmt.Errorf("%w: fasst: no queue pairs", dataplane.ErrInvalidArgument)
	}
	if a.Window < 0 {
		return handshake.Grant{}, fmt.Errorf("%w: fasst: window %d", dataplane.ErrInvalidArgument, a.Window)
	}
	window, err := wk.SessionWindow(a.Window, DefaultWindow, s.cfg.MaxWindow, len(a.QPs), s.cfg.SessionCap(s.cfg.budget()))
	if err != nil {
		return handshake.Grant{}, err
	}
	ids, err := s.cfg.PeerIDs(a.QPs)
	if err != nil {
		return handshake.Grant{}, fmt.Errorf("fasst: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return handshake.Grant{}, fmt.Errorf("%w: fasst: stopping", dataplane.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while waiting for the lock: admitting it
		// now would leave a session nobody knows of.
		return handshake.Grant{}, fmt.Errorf("%w: fasst: connect: %v", dataplane.ErrUnavailable, err)
	}
	prev, _ := wk.Replaced(s.sessions, replaces, s.cfg.Epoch)
	n := len(s.sessions)
	freed := make([]int, len(s.Workers))
	if prev != nil {
		n--
		for _, wi := range prev.worker {
			freed[wi] += prev.window
		}
	}
	if n >= s.cfg.MaxClients {
		return handshake.Grant{}, fmt.Errorf("%w: fasst: %d sessions, the maximum", dataplane.ErrNoCapacity, n)
	}
	for i, id := range ids {
		for _, w := range s.Workers {
			if p := w.peers.Get(id); p != nil && (prev == nil || p.Session != prev.id) {
				return handshake.Grant{}, fmt.Errorf("%w: fasst: QP %v at %v is already connected", dataplane.ErrFailedPrecondition, a.QPs[i].QPN, a.QPs[i].Addr)
			}
		}
	}
	assign := make([]uint32, len(ids))
	extra := make([]int, len(s.Workers))
	for i := range ids {
		wi := (s.rr + i) % len(s.Workers)
		assign[i] = uint32(wi)
		extra[wi] += window
	}
	for wi, e := range extra {
		if b := s.Workers[wi].budget + e - freed[wi]; b > s.cfg.budget() {
			return handshake.Grant{}, fmt.Errorf("%w: fasst: worker %d would take windows of %d, the maximum is %d", dataplane.ErrNoCapacity, wi, b, s.cfg.budget())
		}
	}
	now := time.Now()
	s.nextID++
	sess := &session{id: s.nextID, name: a.Name, window: window}
	// The session's own answer Q_Key: no other client can address its
	// answers (PROTOCOL.md, "Sessions").
	qkey := verbs.RandomQKey(s.cfg.QKey)
	admitted, err := wk.AdmitPeers(s.AHs, a.QPs, ids, sess.id, qkey, window, now)
	if err != nil {
		return handshake.Grant{}, fmt.Errorf("fasst: %w", err)
	}
	for i, p := range admitted {
		sess.peers = append(sess.peers, &peer{Peer: p})
		sess.worker = append(sess.worker, int(assign[i]))
	}
	if prev != nil {
		s.release(prev, now)
	}
	s.rr = (s.rr + len(ids)) % len(s.Workers)
	for i, p := range sess.peers {
		w := s.Workers[sess.worker[i]]
		w.budget += window
		w.peers.Put(p.ID, p)
	}
	s.sessions[sess.id] = sess
	s.nsessions.Store(int64(len(s.sessions)))
	g := handshake.Grant{Session: sess.id, Epoch: s.cfg.Epoch, Window: window, QKey: s.cfg.QKey, AnswerQKey: qkey,
		Assignment: assign, AnswerQPs: s.AnswerQPs} // High: the admin adapter reads it from the oracle
	for _, w := range s.Workers {
		g.ServerQPs = append(g.ServerQPs, handshake.Endpoint{Addr: w.ReqQP.Address(), QPN: w.ReqQP.QPN()})
	}
	s.log.Debug("fasst client admitted", "session", sess.id, "name", a.Name, "qps", len(ids), "window", window)
	return g, nil
}

// Release ends a session of this epoch.
func (s *Server) Release(ctx context.Context, r handshake.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := wk.Lookup(s.sessions, r, s.cfg.Epoch, "fasst: session")
	if err != nil {
		return err
	}
	now := time.Now()
	s.release(sess, now)
	s.AHs.Reap(now)
	s.log.Debug("fasst client released", "session", sess.id, "name", sess.name)
	return nil
}

// release removes sess from the workers' tables; its address handles
// are closed ahcache.Grace later (a worker may hold one in a batch).
// s.mu is held.
func (s *Server) release(sess *session, now time.Time) {
	delete(s.sessions, sess.id)
	s.nsessions.Store(int64(len(s.sessions)))
	for i, p := range sess.peers {
		w := s.Workers[sess.worker[i]]
		w.budget -= sess.window
		w.peers.Delete(p.ID, p)
		s.AHs.Put(p.Addr, now)
	}
}

// Stop drains the mode: the workers finish the batch in hand and exit,
// then every QP moves to ERR so that late requests get no answer. Every
// value the mode handed out was claimed from the oracle, so it returns
// high 0.
func (s *Server) Stop() (uint64, error) {
	if s.Pool.Stop(&s.mu, &s.stopped, s.cancel, (*worker).toErr) {
		s.log.Info("fasst data path stopped")
	}
	return 0, nil
}

// Close stops the mode and releases every verbs resource.
func (s *Server) Close() error {
	s.Stop()
	s.Pool.CloseOnce(&s.mu, nil)
	return nil
}

// Stats sums the workers' counters. Served counts values handed out
// (a request asks for one or more); requests_total the requests
// answered. Drops count requests, except expired and oracle_error, which
// count the values of a batch's claim.
func (s *Server) Stats() dataplane.Stats {
	st := wk.Sum(s.Workers)
	st.Sessions = int(s.nsessions.Load())
	var requests, dupIDs uint64
	for _, w := range s.Workers {
		requests += w.requests.Load()
		dupIDs += w.dupIDs.Load()
	}
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "requests_total", Help: "Requests answered (each for one or more values).", Value: requests},
		dataplane.Counter{Name: "duplicate_ids_total", Help: "Requests with the same ID as the previous request of their QP (network duplicates).", Value: dupIDs})
	return st
}

// AddressHandles is the number of open address handles (tests: churn
// leaves none behind).
func (s *Server) AddressHandles() int { return s.Pool.AddressHandles(&s.mu) }
