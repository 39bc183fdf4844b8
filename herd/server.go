package herd

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/verbs"
)

// Errors of admission.
var (
	ErrClosed    = errors.New("herd: server stopped")
	ErrNoRoom    = errors.New("herd: no free slots")
	ErrArgument  = errors.New("herd: invalid argument")
	ErrNoSession = errors.New("herd: unknown session")
)

// Endpoint is one queue pair as peers see it.
type Endpoint struct {
	Addr verbs.Address
	QPN  verbs.QPN
}

// ClientQP is what a client brings for one of its queue pairs: the UC QP
// it writes requests with and the UD QP answers go to.
type ClientQP struct {
	Write Endpoint // UC, in RESET or INIT until the grant connects it
	Recv  Endpoint // UD
}

// QPGrant is what the server grants one client QP.
type QPGrant struct {
	// Server is the server UC QP the client's Write QP connects to.
	Server Endpoint
	// Addr and RKey name slot 0 of the client QP's block; window position
	// p is at Addr + p*spec.SlotLen.
	Addr uint64
	RKey uint32
	// Worker serves the block.
	Worker int
}

// Grant is an admitted session.
type Grant struct {
	Session uint64
	QKey    uint32
	Window  int
	Epoch   uint64
	QPs     []QPGrant
	// AnswerFrom are the server's response QPs: the client accepts an
	// answer only from one of them.
	AnswerFrom verbs.Senders
}

// Server is a running HERD data path.
type Server struct {
	cfg   Config
	log   *slog.Logger
	pd    verbs.PD
	start time.Time

	stopped atomic.Bool
	wg      sync.WaitGroup
	workers []*worker

	mu         sync.Mutex
	sessions   map[uint64]*session
	nextID     uint64
	rr         int
	answerFrom verbs.Senders  // every worker's response QPs
	ahs        *ahcache.Cache // one handle per client address, reaped after the last client left
	stopOnce   sync.Once
	closed     bool
}

type session struct {
	id      uint64
	name    string
	window  int
	clients []*hclient
	addrs   []verbs.Address // the answer address of each client QP (its handle's key)
}

// New creates the workers (regions, CQs, response QPs) and starts them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}}
	if s.pd, err = cfg.Device.AllocPD(); err != nil {
		return nil, fmt.Errorf("herd: protection domain: %w", err)
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
			s.answerFrom = append(s.answerFrom, verbs.SenderOf(qp.Address(), qp.QPN()))
		}
	}
	for _, w := range s.workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			w.run()
		}()
	}
	s.log.Info("herd data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"resp_qps", cfg.RespQPs, "max_window", cfg.MaxWindow, "epoch", cfg.Epoch)
	return s, nil
}

// Epoch identifies this server run.
func (s *Server) Epoch() uint64 { return s.cfg.Epoch }

// QKey is the Q_Key of the answers.
func (s *Server) QKey() uint32 { return s.cfg.QKey }

// Admit admits a client's QPs: each gets a block of window slots on a
// worker (round-robin) and a server UC QP connected to its Write QP.
func (s *Server) Admit(name string, qps []ClientQP, window int) (Grant, error) {
	if len(qps) == 0 {
		return Grant{}, fmt.Errorf("%w: no queue pairs", ErrArgument)
	}
	if window <= 0 || window > s.cfg.MaxWindow {
		window = min(max(window, DefaultWindow), s.cfg.MaxWindow)
	}
	for i, q := range qps {
		if q.Write.QPN > verbs.MaxQPN || q.Recv.QPN > verbs.MaxQPN {
			return Grant{}, fmt.Errorf("%w: qps[%d]: QPN above 24 bits", ErrArgument, i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return Grant{}, ErrClosed
	}
	sess := &session{name: name, window: window}
	// The session's own answer Q_Key: no other client can address its
	// answers (spec/PROTOCOL.md, "Sessions").
	g := Grant{QKey: verbs.RandomQKey(s.cfg.QKey), Window: window, Epoch: s.cfg.Epoch, AnswerFrom: s.answerFrom}
	now := time.Now()
	fail := func(err error) (Grant, error) {
		for _, c := range sess.clients {
			s.workers[c.worker].release(c)
		}
		for _, a := range sess.addrs {
			s.ahs.Put(a, now)
		}
		return Grant{}, err
	}
	for i, q := range qps {
		wi := (s.rr + i) % len(s.workers)
		w := s.workers[wi]
		ah, err := s.ahs.Get(q.Recv.Addr, now)
		if err != nil {
			return fail(fmt.Errorf("%w: address handle for %v: %v", ErrArgument, q.Recv.Addr, err))
		}
		sess.addrs = append(sess.addrs, q.Recv.Addr)
		c, err := w.admit(q, ah, window)
		if err != nil {
			return fail(err)
		}
		c.qkey = g.QKey // before publish: the worker sees c only then
		sess.clients = append(sess.clients, c)
		g.QPs = append(g.QPs, QPGrant{Server: Endpoint{c.uc.Address(), c.uc.QPN()},
			Addr: w.region.Addr() + uint64(c.base)*slotLen, RKey: w.region.RKey(), Worker: wi})
	}
	s.rr = (s.rr + len(qps)) % len(s.workers)
	s.nextID++
	sess.id = s.nextID
	g.Session = sess.id
	s.sessions[sess.id] = sess
	for _, c := range sess.clients {
		s.workers[c.worker].publish()
	}
	s.log.Info("herd client admitted", "session", sess.id, "name", name, "qps", len(qps), "window", window)
	return g, nil
}

// Release ends a session: its server UC QPs move to ERR and its slots are
// freed once the worker no longer looks at them.
func (s *Server) Release(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrNoSession, id)
	}
	delete(s.sessions, id)
	for _, c := range sess.clients {
		s.workers[c.worker].release(c)
	}
	now := time.Now()
	for _, a := range sess.addrs {
		s.ahs.Put(a, now) // closed ahcache.Grace later: a worker may hold it in a batch
	}
	s.ahs.Reap(now)
	s.log.Info("herd client released", "session", id, "name", sess.name)
	return nil
}

// AddressHandles is the number of open address handles: those of the
// connected clients' addresses and of addresses left within the grace
// period.
func (s *Server) AddressHandles() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ahs.Reap(time.Now())
	return s.ahs.Len()
}

// Sessions is the number of admitted sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Stop drains the mode: the workers finish the batch in hand and exit,
// then every QP (client UC QPs and response QPs) moves to ERR so late
// requests get no answer. After Stop returns, every value the mode handed
// out was claimed from the oracle. Stop is idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped.Store(true)
		s.mu.Unlock()
		s.wg.Wait()
		for _, w := range s.workers {
			w.toErr()
		}
		s.log.Info("herd data path stopped")
	})
	return nil
}

// Close stops the server and releases every verbs resource.
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

// Stats are a snapshot of the data path's counters.
type Stats struct {
	Batches, Requests, Stalls, Duplicates, Malformed uint64
	Drops                                            map[string]uint64
}

// Stats sums the workers' counters.
func (s *Server) Stats() Stats {
	st := Stats{Drops: map[string]uint64{}}
	for _, w := range s.workers {
		ws := &w.stats
		st.Batches += ws.batches.Load()
		st.Requests += ws.requests.Load()
		st.Stalls += ws.stalls.Load()
		st.Duplicates += ws.duplicates.Load()
		st.Malformed += ws.malformed.Load()
		for r := range numDropReasons {
			st.Drops[dropReasonNames[r]] += ws.drops[r].Load()
		}
	}
	return st
}

// WorkerStats is one worker's counters, for status reports.
type WorkerStats struct {
	ID, Core                  int
	Batches, Requests, Drops  uint64
	Duplicates, Stalls, Slots uint64
}

// Workers reports each worker.
func (s *Server) Workers() []WorkerStats {
	out := make([]WorkerStats, len(s.workers))
	for i, w := range s.workers {
		ws := &w.stats
		out[i] = WorkerStats{ID: w.id, Core: w.core, Batches: ws.batches.Load(), Requests: ws.requests.Load(),
			Duplicates: ws.duplicates.Load(), Stalls: ws.stalls.Load(), Slots: uint64(len(*w.clients.Load()))}
		for r := range ws.drops {
			out[i].Drops += ws.drops[r].Load()
		}
	}
	return out
}
