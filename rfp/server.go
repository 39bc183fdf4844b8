package rfp

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

// Defaults filled in by New.
const (
	DefaultMaxWindow = 64
	DefaultWindow    = 16
	DefaultMaxQPs    = 256
	// sendSlack is the send queue depth of a server QP beyond its
	// window: fallback SENDs are at most one per slot and seq.
	sendSlack = 8
)

// ErrConfig reports an invalid configuration.
var ErrConfig = errors.New("rfp: invalid config")

// Config configures a Server.
type Config struct {
	// Device, Oracle, Behind, Workers, Cores, Batch, Epoch and Logger, as
	// every CPU mode takes them (package internal/worker; RespQPs,
	// SignalEvery, SendDepth and QKey are unused: answers are records
	// and, rarely, SENDs on the client's own connection).
	wk.Config
	// MaxWindow is the number of slots per client QP (the largest window
	// granted). Default 64, at most spec.RFPMaxWindow.
	MaxWindow int
	// MaxQPs is the most client QPs per worker. Default 256.
	MaxQPs int
	// Spin and MaxSleep are the idle policy of the workers (wk.Idle).
	Spin, MaxSleep time.Duration
}

func (c Config) validate() (Config, error) {
	if err := c.Config.Fill(ErrConfig); err != nil {
		return c, err
	}
	if err := wk.FillSlots(ErrConfig, &c.MaxWindow, DefaultMaxWindow, spec.RFPMaxWindow, &c.MaxQPs, DefaultMaxQPs); err != nil {
		return c, err
	}
	return c, nil
}

// Server is a running RFP data path. It implements dataplane.Mode.
type Server struct {
	// The workers, which run while !stopped (no PD or address handles:
	// each session has a PD of its own).
	wk.Pool[*worker]
	cfg   Config
	log   *slog.Logger
	start time.Time

	stopped atomic.Bool

	mu       sync.Mutex
	sessions map[uint64]*session
	holders  wk.Held    // which session holds each client QP
	limbo    []*session // released, freed once no sweep can see them
	nextID   uint64
	rr       int
}

var _ dataplane.Mode = (*Server)(nil)

// session is one admitted session: its PD and its client QPs.
type session struct {
	id      uint64
	name    string
	qps     []handshake.Endpoint // the client's, as held in Server.held
	pd      verbs.PD
	clients []*client
	// sweeps[i] is worker i's sweep count when the session was released.
	sweeps []uint64
}

// Start is the mode's dataplane.Factory.
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	wc := wk.ConfigOf(c)
	wc.RespQPs, wc.QKey = 0, 0 // unused: answers leave on the clients' own connections
	return New(Config{Config: wc, MaxWindow: min(c.MaxWindow, spec.RFPMaxWindow), MaxQPs: c.MaxClients})
}

// New creates the workers and starts them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}}
	if err := s.StartWorkers(cfg.Workers, func(i int) (*worker, error) { return newWorker(s, i) }); err != nil {
		s.Close()
		return nil, err
	}
	s.log.Info("rfp data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"max_window", cfg.MaxWindow, "epoch", cfg.Epoch)
	return s, nil
}

// Admit admits a session: for each client RC QP in a.QPs a server RC QP
// connected to it, a request block and a response block on a worker
// (round robin), all in a protection domain of the session's own.
//
// The grant carries, for n client QPs: ServerConnQPs (n); ConnPSNs (2n:
// [0,n) the first PSN each client QP sends, [n,2n) the first PSN each
// server QP sends); RemoteAddr and RKey (2n: [0,n) the request blocks,
// [n,2n) the response blocks); AnswerQKey, the session's answer tag
// every record is checked with.
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	if len(a.QPs) != 0 && len(a.ConnQPs) != 0 {
		return handshake.Grant{}, fmt.Errorf("%w: rfp takes its RC QPs in qps, not conn_qps", dataplane.ErrFailedPrecondition)
	}
	if err := wk.CheckQPs(a.QPs); err != nil {
		return handshake.Grant{}, err
	}
	window := wk.Window(a.Window, DefaultWindow, s.cfg.MaxWindow)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return handshake.Grant{}, fmt.Errorf("%w: rfp stopped", dataplane.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return handshake.Grant{}, fmt.Errorf("%w: %v", dataplane.ErrUnavailable, err)
	}
	s.reclaim()
	// The session replaced, if this mode and epoch hold it: released once
	// this one is admitted, its capacity counted as free meanwhile.
	old, replacing := wk.Replaced(s.sessions, replaces, s.cfg.Epoch)
	var oldID uint64
	if replacing {
		oldID = old.id
	}
	if err := s.holders.Check(a.QPs, oldID); err != nil {
		return handshake.Grant{}, fmt.Errorf("rfp: %w", err)
	}
	spare := make([]int, len(s.Workers))
	if replacing {
		for _, c := range old.clients {
			spare[c.worker]++
		}
	}
	pd, err := s.cfg.Device.AllocPD()
	if err != nil {
		return handshake.Grant{}, fmt.Errorf("%w: protection domain: %v", dataplane.ErrUnavailable, err)
	}
	sess := &session{name: a.Name, pd: pd}
	n := len(a.QPs)
	g := handshake.Grant{Epoch: s.cfg.Epoch, Window: window, AnswerQKey: verbs.RandomQKey(),
		ConnPSNs: make([]verbs.PSN, 2*n), RemoteAddr: make([]uint64, 2*n), RKey: make([]uint32, 2*n)}
	for i, q := range a.QPs {
		w := s.Workers[(s.rr+i)%len(s.Workers)]
		c, err := w.admit(pd, q, window, g.AnswerQKey, spare[w.ID])
		if err != nil {
			for _, c := range sess.clients {
				s.Workers[c.worker].remove(c)
				c.close()
			}
			pd.Close()
			return handshake.Grant{}, err
		}
		sess.clients = append(sess.clients, c)
		g.ServerConnQPs = append(g.ServerConnQPs, handshake.Endpoint{Addr: c.qp.Address(), QPN: c.qp.QPN()})
		g.ConnPSNs[i], g.ConnPSNs[n+i] = c.rqPSN, c.sqPSN
		g.RemoteAddr[i], g.RKey[i] = c.req.Addr(), c.req.RKey()
		g.RemoteAddr[n+i], g.RKey[n+i] = c.resp.Addr(), c.resp.RKey()
	}
	s.rr = (s.rr + n) % len(s.Workers)
	if replacing {
		s.release(old)
	}
	s.nextID++
	sess.id = s.nextID
	g.Session = sess.id
	s.sessions[sess.id] = sess
	sess.qps = slices.Clone(a.QPs)
	if s.holders == nil {
		s.holders = wk.Held{}
	}
	s.holders.Add(sess.qps, sess.id)
	for _, c := range sess.clients {
		s.Workers[c.worker].publish()
	}
	s.log.Debug("rfp client admitted", "session", sess.id, "name", a.Name, "qps", n, "window", window)
	return g, nil
}

// Release ends a session: its QPs move to ERR at once (no more WRITEs or
// READs) and its memory is freed once no worker sweep can still see it.
func (s *Server) Release(ctx context.Context, ref handshake.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := wk.Lookup(s.sessions, ref, s.cfg.Epoch, "rfp session")
	if err != nil {
		return err
	}
	s.release(sess)
	s.reclaim()
	s.log.Debug("rfp client released", "session", ref.ID, "name", sess.name)
	return nil
}

// release takes sess out of service. Called with s.mu held.
func (s *Server) release(sess *session) {
	delete(s.sessions, sess.id)
	s.holders.Remove(sess.qps, sess.id)
	for _, c := range sess.clients {
		c.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		s.Workers[c.worker].remove(c)
	}
	sess.sweeps = make([]uint64, len(s.Workers))
	for i, w := range s.Workers {
		sess.sweeps[i] = w.sweeps.Load()
	}
	s.limbo = append(s.limbo, sess)
}

// reclaim frees released sessions that every worker has swept past (a
// sweep that started after the release no longer lists them). Called
// with s.mu held.
func (s *Server) reclaim() {
	keep := s.limbo[:0]
	for _, sess := range s.limbo {
		done := s.stopped.Load()
		if !done {
			done = true
			for i, w := range s.Workers {
				if w.sweeps.Load() <= sess.sweeps[i]+1 {
					done = false
				}
			}
		}
		if !done {
			keep = append(keep, sess)
			continue
		}
		sess.close()
	}
	clear(s.limbo[len(keep):])
	s.limbo = keep
}

func (sess *session) close() {
	for _, c := range sess.clients {
		c.close()
	}
	sess.clients = nil
	if sess.pd != nil {
		sess.pd.Close()
		sess.pd = nil
	}
}

// Stop drains the mode: the workers finish the batch in hand and exit,
// then every QP moves to ERR. It returns 0: every value the mode handed
// out was claimed from the oracle. Stop is idempotent.
func (s *Server) Stop() (uint64, error) {
	if s.Pool.Stop(&s.mu, &s.stopped, nil, nil) {
		s.mu.Lock()
		e := &verbs.QPAttr{State: verbs.StateErr}
		for _, sess := range s.sessions {
			for _, c := range sess.clients {
				c.qp.Modify(e, verbs.AttrState)
			}
		}
		s.mu.Unlock()
		s.log.Info("rfp data path stopped")
	}
	return 0, nil
}

// Close stops the server and releases every verbs resource.
func (s *Server) Close() error {
	s.Stop()
	s.Pool.CloseOnce(&s.mu, func() {
		for id, sess := range s.sessions {
			sess.close()
			delete(s.sessions, id)
		}
		for _, sess := range s.limbo {
			sess.close()
		}
		s.limbo = nil
	})
	return nil
}

// Sessions is the number of admitted sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Stats sums the workers' counters.
func (s *Server) Stats() dataplane.Stats {
	st := wk.Sum(s.Workers)
	st.Sessions = s.Sessions()
	var sends, resends, dups, malformed uint64
	for _, w := range s.Workers {
		sends += w.stats.sends.Load()
		resends += w.stats.resends.Load()
		dups += w.stats.duplicates.Load()
		malformed += w.stats.malformed.Load()
	}
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "reply_sends_total", Help: "Answers also SENT because the client asked after R READs (server-reply fallback).", Value: sends},
		dataplane.Counter{Name: "reply_resends_total", Help: "Fallback SENDs of a record already written (no new claim).", Value: resends},
		dataplane.Counter{Name: "duplicates_total", Help: "Requests of a seq already taken, or older.", Value: dups},
		dataplane.Counter{Name: "malformed_total", Help: "Request slots that did not decode.", Value: malformed})
	return st
}
