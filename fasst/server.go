package fasst

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/verbs"
)

// Server is a running FaSST data path.
type Server struct {
	cfg    config
	log    *slog.Logger
	pd     verbs.PD
	ctx    context.Context // cancelled by Stop: wakes workers blocked in CQ.Wait
	cancel context.CancelFunc
	start  time.Time

	stopped atomic.Bool
	wg      sync.WaitGroup
	workers []*worker
	// answerQPs are every worker's response QPs: answers come only from
	// these.
	answerQPs []dataplane.Endpoint

	mu        sync.Mutex
	sessions  map[uint64]*session
	nsessions atomic.Int64
	nextID    uint64
	rr        int
	ahs       *ahcache.Cache // one handle per client address, reaped after the last client left
	stopOnce  sync.Once
	closed    bool
	high      uint64 // Stop's answer
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
	return New(c)
}

// New is Start with the concrete type, for tests.
func New(c dataplane.Config) (*Server, error) {
	cfg, err := newConfig(c)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.pd, err = cfg.Device.AllocPD(); err != nil {
		return nil, fmt.Errorf("fasst: protection domain: %w", err)
	}
	s.ahs = ahcache.New(s.pd, 0)
	for i := range cfg.Workers {
		w, err := newWorker(s, i)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.workers = append(s.workers, w)
	}
	for _, w := range s.workers {
		for _, qp := range w.resp.QPs() {
			s.answerQPs = append(s.answerQPs, dataplane.Endpoint{Addr: qp.Address(), QPN: qp.QPN()})
		}
	}
	for _, w := range s.workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			w.run()
		}()
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
func (s *Server) Admit(ctx context.Context, a dataplane.Admission, replaces dataplane.SessionRef) (dataplane.Grant, error) {
	if s.stopped.Load() {
		return dataplane.Grant{}, fmt.Errorf("%w: fasst: stopping", dataplane.ErrUnavailable)
	}
	if len(a.QPs) == 0 {
		return dataplane.Grant{}, fmt.Errorf("%w: fasst: no queue pairs", dataplane.ErrInvalidArgument)
	}
	if a.Window < 0 {
		return dataplane.Grant{}, fmt.Errorf("%w: fasst: window %d", dataplane.ErrInvalidArgument, a.Window)
	}
	window := a.Window
	if window == 0 {
		window = DefaultWindow
	}
	window = min(window, s.cfg.MaxWindow)
	keys := make([]peerKey, len(a.QPs))
	for i, q := range a.QPs {
		if q.QPN > verbs.MaxQPN {
			return dataplane.Grant{}, fmt.Errorf("%w: fasst: qps[%d]: QPN above 24 bits", dataplane.ErrInvalidArgument, i)
		}
		keys[i] = peerKey{q.Addr, q.QPN}
		for _, k := range keys[:i] {
			if k == keys[i] {
				return dataplane.Grant{}, fmt.Errorf("%w: fasst: qps[%d] named twice", dataplane.ErrInvalidArgument, i)
			}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return dataplane.Grant{}, fmt.Errorf("%w: fasst: stopping", dataplane.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while waiting for the lock: admitting it
		// now would leave a session nobody knows of.
		return dataplane.Grant{}, fmt.Errorf("%w: fasst: connect: %v", dataplane.ErrUnavailable, err)
	}
	var prev *session
	if replaces.ID != 0 && replaces.Epoch == s.cfg.Epoch {
		prev = s.sessions[replaces.ID]
	}
	n := len(s.sessions)
	freed := make([]int, len(s.workers))
	if prev != nil {
		n--
		for _, wi := range prev.worker {
			freed[wi] += prev.window
		}
	}
	if n >= s.cfg.MaxClients {
		return dataplane.Grant{}, fmt.Errorf("%w: fasst: %d sessions, the maximum", dataplane.ErrNoCapacity, n)
	}
	for _, k := range keys {
		for _, w := range s.workers {
			if p := (*w.peers.Load())[k]; p != nil && (prev == nil || p.session != prev.id) {
				return dataplane.Grant{}, fmt.Errorf("%w: fasst: QP %v at %v is already connected", dataplane.ErrFailedPrecondition, k.qpn, k.addr)
			}
		}
	}
	assign := make([]uint32, len(keys))
	extra := make([]int, len(s.workers))
	for i := range keys {
		wi := (s.rr + i) % len(s.workers)
		assign[i] = uint32(wi)
		extra[wi] += window
	}
	for wi, e := range extra {
		if b := s.workers[wi].budget + e - freed[wi]; b > s.cfg.budget() {
			return dataplane.Grant{}, fmt.Errorf("%w: fasst: worker %d would take windows of %d, the maximum is %d", dataplane.ErrNoCapacity, wi, b, s.cfg.budget())
		}
	}
	now := time.Now()
	s.nextID++
	sess := &session{id: s.nextID, name: a.Name, window: window}
	// The session's own answer Q_Key: no other client can address its
	// answers (PROTOCOL.md, "Sessions").
	qkey := verbs.RandomQKey(s.cfg.QKey)
	for i, k := range keys {
		ah, err := s.ahs.Get(k.addr, now)
		if err != nil {
			for _, p := range sess.peers {
				s.ahs.Put(p.key.addr, now)
			}
			return dataplane.Grant{}, fmt.Errorf("%w: fasst: address handle for %v: %v", dataplane.ErrInvalidArgument, k.addr, err)
		}
		sess.peers = append(sess.peers, &peer{key: k, ah: ah, session: sess.id, qkey: qkey, window: window})
		sess.worker = append(sess.worker, int(assign[i]))
	}
	if prev != nil {
		s.release(prev, now)
	}
	s.rr = (s.rr + len(keys)) % len(s.workers)
	for i, p := range sess.peers {
		w := s.workers[sess.worker[i]]
		w.budget += window
		w.setPeers(func(t peerTable) { t[p.key] = p })
	}
	s.sessions[sess.id] = sess
	s.nsessions.Store(int64(len(s.sessions)))
	g := dataplane.Grant{Session: sess.id, Epoch: s.cfg.Epoch, Window: window, QKey: s.cfg.QKey, AnswerQKey: qkey,
		Assignment: assign, AnswerQPs: s.answerQPs, High: s.cfg.Oracle.Current()}
	for _, w := range s.workers {
		g.ServerQPs = append(g.ServerQPs, dataplane.Endpoint{Addr: w.reqQP.Address(), QPN: w.reqQP.QPN()})
	}
	s.log.Info("fasst client admitted", "session", sess.id, "name", a.Name, "qps", len(keys), "window", window)
	return g, nil
}

// Release ends a session of this epoch.
func (s *Server) Release(ctx context.Context, r dataplane.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[r.ID]
	if !ok || r.Epoch != s.cfg.Epoch {
		return fmt.Errorf("%w: fasst: session %d of epoch %d", dataplane.ErrUnknownSession, r.ID, r.Epoch)
	}
	now := time.Now()
	s.release(sess, now)
	s.ahs.Reap(now)
	s.log.Info("fasst client released", "session", sess.id, "name", sess.name)
	return nil
}

// release removes sess from the workers' tables; its address handles
// are closed ahcache.Grace later (a worker may hold one in a batch).
// s.mu is held.
func (s *Server) release(sess *session, now time.Time) {
	delete(s.sessions, sess.id)
	s.nsessions.Store(int64(len(s.sessions)))
	for i, p := range sess.peers {
		w := s.workers[sess.worker[i]]
		w.budget -= sess.window
		w.setPeers(func(t peerTable) {
			if t[p.key] == p {
				delete(t, p.key)
			}
		})
		s.ahs.Put(p.key.addr, now)
	}
}

// Stop drains the mode: the workers finish the batch in hand and exit,
// then every QP moves to ERR so that late requests get no answer. Every
// value the mode handed out was claimed from the oracle, so it returns
// high 0.
func (s *Server) Stop() (uint64, error) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped.Store(true)
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		for _, w := range s.workers {
			w.toErr()
		}
		s.log.Info("fasst data path stopped")
	})
	return 0, nil
}

// Close stops the mode and releases every verbs resource.
func (s *Server) Close() error {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, w := range s.workers {
		w.close()
	}
	s.ahs.Close()
	if s.pd != nil {
		s.pd.Close()
	}
	return nil
}

// Stats sums the workers' counters.
func (s *Server) Stats() dataplane.Stats {
	st := dataplane.Stats{Sessions: int(s.nsessions.Load())}
	var drops [numDropReasons]uint64
	var dupIDs, requests uint64
	for _, w := range s.workers {
		ws := &w.stats
		wst := dataplane.WorkerStats{ID: w.id, Core: w.core, Batches: ws.batches.Load(), Requests: ws.values.Load()}
		for r := range numDropReasons {
			d := ws.drops[r].Load()
			drops[r] += d
			wst.Drops += d
		}
		st.Served += wst.Requests
		st.Batches += wst.Batches
		st.Drops += wst.Drops
		st.Stalls += ws.stalls.Load()
		dupIDs += ws.dupIDs.Load()
		requests += ws.requests.Load()
		st.Workers = append(st.Workers, wst)
	}
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "requests_total", Help: "Requests answered (each for one or more values).", Value: requests},
		dataplane.Counter{Name: "duplicate_ids_total", Help: "Requests with the same ID as the previous request of their QP (network duplicates, answered again with new values).", Value: dupIDs})
	for r := range numDropReasons {
		st.Counters = append(st.Counters, dataplane.Counter{Name: "drops_total", Help: "Requests received and not answered, by reason.",
			Reason: dropReasonNames[r], Value: drops[r]})
	}
	return st
}

// AddressHandles is the number of open address handles (tests: churn
// leaves none behind).
func (s *Server) AddressHandles() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ahs.Reap(time.Now())
	return s.ahs.Len()
}
