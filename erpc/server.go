package erpc

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
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Server is a running eRPC data path.
type Server struct {
	// The protection domain, the clients' address handles, the workers
	// and their response QPs (AnswerQPs: answers come only from these).
	wk.Pool[*worker]
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // cancelled by Stop: wakes workers blocked in CQ.Wait
	cancel context.CancelFunc
	start  time.Time
	// buffer is the device's receive buffer in requests (-1: no limit).
	buffer int

	stopped atomic.Bool

	mu        sync.Mutex
	sessions  map[uint64]*session
	nsessions atomic.Int64
	credits   int // credits of every admitted session endpoint; s.mu
	endpoints int // client QPs of every admitted session; s.mu
	nextID    uint64
	rr        int
	refused   atomic.Uint64 // admissions refused for capacity
}

type session struct {
	id      uint64
	name    string
	credits int
	peers   []*peer
	worker  []int
}

var _ dataplane.Mode = (*Server)(nil)

// Start creates the workers' queue pairs and starts them (a
// dataplane.Factory). dataplane.Config.MaxWindow is the most credits a
// session is granted.
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	return New(Config{Config: wk.ConfigOf(c), MaxCredits: c.MaxWindow, MaxClients: c.MaxClients, Format: c.Format})
}

// New creates the workers' queue pairs and starts them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}, buffer: cfg.deviceBuffer()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.Start(cfg.Device, cfg.Workers, func(i int) (*worker, error) { return newWorker(s, i) }); err != nil {
		s.Close()
		return nil, fmt.Errorf("erpc: %w", err)
	}
	s.log.Info("erpc data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"resp_qps", cfg.RespQPs, "max_credits", cfg.MaxCredits, "recv_queue", cfg.RecvQueue,
		"recv_buffer", s.buffer, "epoch", cfg.Epoch)
	return s, nil
}

// Capacity is how many credits the server admits in all: the posted
// receives of its workers, and the device's receive buffer where it is
// smaller.
func (s *Server) Capacity() int {
	c := s.cfg.budget() * len(s.Workers)
	if s.buffer >= 0 {
		c = min(c, s.buffer)
	}
	return c
}

// Admit admits a session: each client QP is a session endpoint with
// spec.ERPCSlots slots and the session's credits (a.Window, default
// spec.ERPCDefaultCredits, at most MaxCredits), assigned to a worker
// round-robin. It refuses (ErrNoCapacity) a session whose credits would
// not fit the receive capacity: every admitted session can always have
// all its credits in flight without a packet dropped for want of a
// receive.
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	if s.stopped.Load() {
		return handshake.Grant{}, fmt.Errorf("%w: erpc: stopping", dataplane.ErrUnavailable)
	}
	if len(a.QPs) == 0 {
		return handshake.Grant{}, fmt.Errorf("%w: erpc: no queue pairs", dataplane.ErrInvalidArgument)
	}
	if a.Window < 0 {
		return handshake.Grant{}, fmt.Errorf("%w: erpc: credits %d", dataplane.ErrInvalidArgument, a.Window)
	}
	credits := wk.Window(a.Window, spec.ERPCDefaultCredits, s.cfg.MaxCredits)
	ids, err := s.cfg.PeerIDs(a.QPs)
	if err != nil {
		return handshake.Grant{}, fmt.Errorf("erpc: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return handshake.Grant{}, fmt.Errorf("%w: erpc: stopping", dataplane.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return handshake.Grant{}, fmt.Errorf("%w: erpc: connect: %v", dataplane.ErrUnavailable, err)
	}
	prev, _ := wk.Replaced(s.sessions, replaces, s.cfg.Epoch)
	endpoints := s.endpoints
	freed := make([]int, len(s.Workers))
	freedAll := 0
	if prev != nil {
		endpoints -= len(prev.peers)
		for _, wi := range prev.worker {
			freed[wi] += prev.credits
			freedAll += prev.credits
		}
	}
	if endpoints+len(ids) > s.cfg.MaxClients {
		s.refused.Add(1)
		return handshake.Grant{}, fmt.Errorf("%w: erpc: %d session endpoints, the maximum is %d", dataplane.ErrNoCapacity, endpoints+len(ids), s.cfg.MaxClients)
	}
	for i, id := range ids {
		for _, w := range s.Workers {
			if p := w.peers.Get(id); p != nil && (prev == nil || p.Session != prev.id) {
				return handshake.Grant{}, fmt.Errorf("%w: erpc: QP %v at %v is already connected", dataplane.ErrFailedPrecondition, a.QPs[i].QPN, a.QPs[i].Addr)
			}
		}
	}
	if total := s.credits - freedAll + credits*len(ids); s.buffer >= 0 && total > s.buffer {
		s.refused.Add(1)
		return handshake.Grant{}, fmt.Errorf("%w: erpc: sessions × credits would be %d, above the device's receive buffer of %d requests",
			dataplane.ErrNoCapacity, total, s.buffer)
	}
	assign := make([]uint32, len(ids))
	extra := make([]int, len(s.Workers))
	for i := range ids {
		wi := (s.rr + i) % len(s.Workers)
		assign[i] = uint32(wi)
		extra[wi] += credits
	}
	for wi, e := range extra {
		if b := s.Workers[wi].credits + e - freed[wi]; b > s.cfg.budget() {
			s.refused.Add(1)
			return handshake.Grant{}, fmt.Errorf("%w: erpc: sessions × credits on worker %d would be %d, above its %d posted receives",
				dataplane.ErrNoCapacity, wi, b, s.cfg.budget())
		}
	}
	now := time.Now()
	s.nextID++
	sess := &session{id: s.nextID, name: a.Name, credits: credits}
	qkey := verbs.RandomQKey(s.cfg.QKey)
	admitted, err := wk.AdmitPeers(s.AHs, a.QPs, ids, sess.id, qkey, credits, now)
	if err != nil {
		return handshake.Grant{}, fmt.Errorf("erpc: %w", err)
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
		w.credits += credits
		s.credits += credits
		w.peers.Put(p.ID, p)
	}
	s.sessions[sess.id] = sess
	s.endpoints += len(sess.peers)
	s.nsessions.Store(int64(len(s.sessions)))
	g := handshake.Grant{Session: sess.id, Epoch: s.cfg.Epoch, Window: credits, QKey: s.cfg.QKey, AnswerQKey: qkey,
		Assignment: assign, AnswerQPs: s.AnswerQPs}
	for _, w := range s.Workers {
		g.ServerQPs = append(g.ServerQPs, handshake.Endpoint{Addr: w.ReqQP.Address(), QPN: w.ReqQP.QPN()})
	}
	s.log.Debug("erpc session admitted", "session", sess.id, "name", a.Name, "qps", len(ids), "credits", credits)
	return g, nil
}

// Release ends a session of this epoch.
func (s *Server) Release(ctx context.Context, r handshake.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := wk.Lookup(s.sessions, r, s.cfg.Epoch, "erpc: session")
	if err != nil {
		return err
	}
	now := time.Now()
	s.release(sess, now)
	s.AHs.Reap(now)
	s.log.Debug("erpc session released", "session", sess.id, "name", sess.name)
	return nil
}

// release removes sess from the workers' tables; its address handles
// are closed ahcache.Grace later. s.mu is held.
func (s *Server) release(sess *session, now time.Time) {
	delete(s.sessions, sess.id)
	s.endpoints -= len(sess.peers)
	s.nsessions.Store(int64(len(s.sessions)))
	for i, p := range sess.peers {
		w := s.Workers[sess.worker[i]]
		w.credits -= sess.credits
		s.credits -= sess.credits
		w.peers.Delete(p.ID, p)
		s.AHs.Put(p.Addr, now)
	}
}

// Stop drains the mode: the workers finish the burst in hand and exit,
// then every QP moves to ERR. Every value was claimed from the oracle:
// high is 0.
func (s *Server) Stop() (uint64, error) {
	if s.Pool.Stop(&s.mu, &s.stopped, s.cancel, (*worker).toErr) {
		s.log.Info("erpc data path stopped")
	}
	return 0, nil
}

// Close stops the mode and releases every verbs resource.
func (s *Server) Close() error {
	s.Stop()
	s.Pool.CloseOnce(&s.mu, nil)
	return nil
}

// Stats sums the workers' counters. Served counts the values of the
// requests that ran whose answers left (one the provider dropped, its
// value then handed out by a resend from the slot, is not counted);
// requests_total the requests that ran; resends_total the
// retransmissions answered from their slot.
func (s *Server) Stats() dataplane.Stats {
	st := wk.Sum(s.Workers)
	st.Sessions = int(s.nsessions.Load())
	var requests, resends, pongs uint64
	for _, w := range s.Workers {
		requests += w.requests.Load()
		resends += w.resends.Load()
		pongs += w.pongs.Load()
	}
	st.Retransmits += resends
	s.mu.Lock()
	credits := s.credits
	s.mu.Unlock()
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "requests_total", Help: "Requests run (each for one or more values).", Value: requests},
		dataplane.Counter{Name: "resends_total", Help: "Retransmitted requests answered from their slot, claiming nothing (at-most-once).", Value: resends},
		dataplane.Counter{Name: "pongs_total", Help: "Heartbeats answered.", Value: pongs},
		dataplane.Counter{Name: "refused_total", Help: "Connects refused: sessions × credits past the receive capacity.", Value: s.refused.Load()},
		dataplane.Counter{Name: "credits", Help: "Credits of the admitted sessions.", Value: uint64(credits), Gauge: true},
		dataplane.Counter{Name: "credit_capacity", Help: "Credits the receive capacity admits.", Value: uint64(s.Capacity()), Gauge: true})
	return st
}

// AddressHandles is the number of open address handles.
func (s *Server) AddressHandles() int { return s.Pool.AddressHandles(&s.mu) }
