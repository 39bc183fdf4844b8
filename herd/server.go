package herd

import (
	"context"
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

// Errors of admission, each wrapping its dataplane kind.
var (
	ErrClosed    = fmt.Errorf("herd: server stopped: %w", dataplane.ErrUnavailable)
	ErrNoRoom    = fmt.Errorf("herd: no free slots: %w", dataplane.ErrNoCapacity)
	ErrArgument  = fmt.Errorf("herd: %w", dataplane.ErrInvalidArgument)
	ErrNoSession = fmt.Errorf("herd: %w", dataplane.ErrUnknownSession)
)

// Server is a running HERD data path.
type Server struct {
	wk.Pool[*worker] // the workers run while !stopped
	cfg              Config
	log              *slog.Logger
	start            time.Time

	stopped atomic.Bool

	mu       sync.Mutex
	sessions map[uint64]*session
	holders  wk.Held // which session holds each client write QP
	nextID   uint64
	rr       int
}

type session struct {
	id      uint64
	name    string
	window  int
	clients []*hclient
	addrs   []verbs.Address      // the answer address of each client QP (its handle's key)
	conn    []handshake.Endpoint // the client's write QPs, as held in Server.holders
}

var _ dataplane.Mode = (*Server)(nil)

// Start starts the HERD data path with the settings every mode takes and
// the defaults of the rest (dataplane.Factory): one block of slots per
// client QP, at most MaxClients client QPs per worker.
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	mw := c.MaxWindow
	if mw > spec.HERDMaxWindow {
		mw = spec.HERDMaxWindow
	}
	return New(Config{Config: wk.ConfigOf(c), MaxWindow: mw, MaxQPs: c.MaxClients})
}

// New creates the workers (regions, CQs, response QPs) and starts them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}}
	if err := s.Start(cfg.Device, cfg.Workers, func(i int) (*worker, error) { return newWorker(s, i) }); err != nil {
		s.Close()
		return nil, err
	}
	s.log.Info("herd data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"resp_qps", cfg.RespQPs, "max_window", cfg.MaxWindow, "epoch", cfg.Epoch)
	return s, nil
}

// Epoch identifies this server run.
func (s *Server) Epoch() uint64 { return s.cfg.Epoch }

// Admit admits a client's QPs: a.QPs are its UD answer QPs, a.ConnQPs
// its UC write QPs, one per answer QP. Each gets, on a worker
// (round-robin), a protection domain of its own holding a block of window
// slots and a server UC QP connected to its write QP: only that QP can
// write the block. A session replaces names (of this epoch) is released
// once the admission is checked, before the new session takes slots
// (herd's sessions never share QPs, so its resources need not pass to
// the new one).
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	var no handshake.Grant
	if len(a.QPs) == 0 {
		return no, fmt.Errorf("%w: no queue pairs", ErrArgument)
	}
	if len(a.ConnQPs) != len(a.QPs) {
		return no, fmt.Errorf("%w: herd needs one UC write QP (conn QPs) per answer QP", dataplane.ErrFailedPrecondition)
	}
	window := wk.Window(a.Window, DefaultWindow, s.cfg.MaxWindow)
	for i := range a.QPs {
		if a.ConnQPs[i].QPN > verbs.MaxQPN || a.QPs[i].QPN > verbs.MaxQPN {
			return no, fmt.Errorf("%w: qps[%d]: QPN above 24 bits", ErrArgument, i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return no, ErrClosed
	}
	old, replacing := wk.Replaced(s.sessions, replaces, s.cfg.Epoch)
	var oldID uint64
	if replacing {
		oldID = old.id
	}
	if err := s.holders.Check(a.ConnQPs, oldID); err != nil {
		return no, fmt.Errorf("herd: %w", err)
	}
	if replacing {
		// Released before the admission: its blocks return to the
		// workers only after their next sweep, so a full worker may
		// still refuse the new session, which then does not get the old
		// one back (dataplane.Mode allows it for herd).
		s.release(old)
	}
	sess := &session{name: a.Name, window: window}
	// The session's own answer Q_Key: no other client can address its
	// answers (spec/PROTOCOL.md, "Sessions").
	g := handshake.Grant{QKey: s.cfg.QKey, AnswerQKey: verbs.RandomQKey(s.cfg.QKey), Window: window, Epoch: s.cfg.Epoch,
		AnswerQPs: s.AnswerQPs}
	now := time.Now()
	fail := func(err error) (handshake.Grant, error) {
		for _, c := range sess.clients {
			s.Workers[c.worker].release(c)
		}
		for _, a := range sess.addrs {
			s.AHs.Put(a, now)
		}
		return no, err
	}
	for i := range a.QPs {
		wi := (s.rr + i) % len(s.Workers)
		w := s.Workers[wi]
		recv := a.QPs[i]
		ah, err := s.AHs.Get(recv.Addr, now)
		if err != nil {
			return fail(fmt.Errorf("%w: address handle for %v: %v", ErrArgument, recv.Addr, err))
		}
		sess.addrs = append(sess.addrs, recv.Addr)
		c, err := w.admit(a.ConnQPs[i], recv, ah, window)
		if err != nil {
			return fail(err)
		}
		c.qkey = g.AnswerQKey // before publish: the worker sees c only then
		sess.clients = append(sess.clients, c)
		g.ServerConnQPs = append(g.ServerConnQPs, handshake.Endpoint{Addr: c.uc.Address(), QPN: c.uc.QPN()})
		g.RemoteAddr = append(g.RemoteAddr, c.mr.Addr())
		g.RKey = append(g.RKey, c.mr.RKey())
		g.Assignment = append(g.Assignment, uint32(i))
	}
	s.rr = (s.rr + len(a.QPs)) % len(s.Workers)
	s.nextID++
	sess.id = s.nextID
	g.Session = sess.id
	s.sessions[sess.id] = sess
	sess.conn = slices.Clone(a.ConnQPs)
	if s.holders == nil {
		s.holders = wk.Held{}
	}
	s.holders.Add(sess.conn, sess.id)
	for _, c := range sess.clients {
		s.Workers[c.worker].publish()
	}
	s.log.Debug("herd client admitted", "session", sess.id, "name", a.Name, "qps", len(a.QPs), "window", window)
	return g, nil
}

// Release ends a session: its server UC QPs move to ERR and its slots are
// freed once the worker no longer looks at them.
func (s *Server) Release(ctx context.Context, r handshake.SessionRef) error {
	id := r.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if !ok || r.Epoch != s.cfg.Epoch {
		return fmt.Errorf("%w: %d of epoch %d", ErrNoSession, id, r.Epoch)
	}
	s.release(sess)
	return nil
}

// release ends sess. Called with s.mu held.
func (s *Server) release(sess *session) {
	delete(s.sessions, sess.id)
	s.holders.Remove(sess.conn, sess.id)
	for _, c := range sess.clients {
		s.Workers[c.worker].release(c)
	}
	now := time.Now()
	for _, a := range sess.addrs {
		s.AHs.Put(a, now) // closed ahcache.Grace later: a worker may hold it in a batch
	}
	s.AHs.Reap(now)
	s.log.Debug("herd client released", "session", sess.id, "name", sess.name)
}

// AddressHandles is the number of open address handles: those of the
// connected clients' addresses and of addresses left within the grace
// period.
func (s *Server) AddressHandles() int { return s.Pool.AddressHandles(&s.mu) }

// sessionCount is the number of admitted sessions.
func (s *Server) sessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Stop drains the mode: the workers finish the batch in hand and exit,
// then every QP (client UC QPs and response QPs) moves to ERR so late
// requests get no answer. After Stop returns, every value the mode handed
// out was claimed from the oracle (high is 0). Stop is idempotent.
func (s *Server) Stop() (high uint64, err error) {
	if s.Pool.Stop(&s.mu, &s.stopped, nil, (*worker).toErr) {
		s.log.Info("herd data path stopped")
	}
	return 0, nil
}

// Close stops the server and releases every verbs resource.
func (s *Server) Close() error {
	s.Stop()
	// The workers close every client's resources: no session is left to
	// release (a Release after Close finds none).
	s.Pool.CloseOnce(&s.mu, func() { clear(s.sessions); clear(s.holders) })
	return nil
}

// totals are the workers' counters added up (tests).
type totals struct {
	wk.Totals
	Duplicates uint64
	Ahead      uint64
}

func (s *Server) totals() totals {
	t := totals{Totals: wk.Total(s.Workers)}
	for _, w := range s.Workers {
		t.Duplicates += w.stats.duplicates.Load()
		t.Ahead += w.stats.ahead.Load()
	}
	return t
}

// Stats reports each worker and the data path. Its Counters are the
// metrics seqd_herd_*.
func (s *Server) Stats() dataplane.Stats {
	st := wk.Sum(s.Workers)
	st.Sessions = s.sessionCount()
	var malformed, ahead uint64
	for i, w := range s.Workers {
		st.Workers[i].Retransmits = w.stats.duplicates.Load()
		st.Retransmits += st.Workers[i].Retransmits
		malformed += w.stats.malformed.Load()
		ahead += w.stats.ahead.Load()
	}
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "duplicates_total", Help: "WRITEs of a (slot, seq) already answered, or older.", Value: st.Retransmits},
		dataplane.Counter{Name: "malformed_total", Help: "Slots that did not decode.", Value: malformed},
		dataplane.Counter{Name: "ahead_total", Help: "WRITEs of a seq too far past the slot's last answered (spec.HERDMaxStep), dropped.", Value: ahead})
	return st
}
