package headeronly

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

// Server is a running Spec-S0 data path. It implements dataplane.Mode.
type Server struct {
	wk.Pool[*worker] // the workers run until closed
	cfg              Config
	log              *slog.Logger
	ctx              context.Context
	cancel           context.CancelFunc
	start            time.Time
	closed           atomic.Bool

	mu        sync.Mutex
	sessions  map[uint64]*session
	nsessions atomic.Int64 // len(sessions), for Status without mu (held while admitting)
	nextID    uint64
	rr        int
	closeOnce sync.Once
}

type session struct {
	id     uint64
	name   string
	window int    // per client QP; also the receives of each of its own request QPs
	qkey   uint32 // the Q_Key its answers carry (ConnectResponse.answer_qkey)
	peers  []*peer
	worker []int
	rqs    []*recvQ // its own request QPs, one per peer (none with SharedRecv)
}

var _ dataplane.Mode = (*Server)(nil)

// Start starts the Spec-S0 data path with the settings every mode takes
// and the defaults of the rest (dataplane.Factory).
func Start(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
	return New(Config{Config: wk.ConfigOf(c), Format: c.Format, MaxWindow: c.MaxWindow, MaxClients: c.MaxClients,
		SharedRecv: c.SharedRecv})
}

// New creates the server's queue pairs and starts its workers.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sessions: map[uint64]*session{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.Start(cfg.Device, cfg.Workers, func(i int) (*worker, error) { return newWorker(s, i) }); err != nil {
		s.Close()
		return nil, err
	}
	s.log.Info("spec-s0 data path up", "device", cfg.Device.Name(), "workers", cfg.Workers,
		"resp_qps", cfg.RespQPs, "format", cfg.Format, "epoch", cfg.Epoch, "request_qps", recvName(cfg.SharedRecv))
	return s, nil
}

// Endpoints returns the request QP of each worker.
func (s *Server) Endpoints() []handshake.Endpoint {
	eps := make([]handshake.Endpoint, len(s.Workers))
	for i, w := range s.Workers {
		eps[i] = handshake.Endpoint{Addr: w.reqQP.Address(), QPN: w.reqQP.QPN()}
	}
	return eps
}

// Close stops the workers and releases every verbs resource. It is safe to
// call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cancel()
		s.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.Pool.Close()
	})
	return nil
}

// Stop closes the server: its QPs are destroyed, so late requests are
// dropped by the provider; every value it handed out was claimed.
func (s *Server) Stop() (uint64, error) { return 0, s.Close() }

// Admit admits a client: each of its QPs is assigned to a worker
// (round-robin) whose receive queue grows by the granted window. When
// replaces names a session of this epoch, it is released in the same
// step: the new session may take its QPs and receive budget; when the
// admission is refused, the old session stays.
// The session's own request QPs have their receives posted before the
// client hears yes, so that its first requests find them; they are
// handed to their workers, which adopt them at their next loop, or at
// the first completion of one (worker.rqOf), whichever comes first. A
// Connect does not wait for that: in a storm of Connects a worker round
// trip each (the worker busy answering the sessions admitted before)
// held the Connects' slots and halved the rate of admissions.
func (s *Server) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	g, _, err := s.admitLocked(ctx, a, replaces)
	return g, err
}

func (s *Server) admitLocked(ctx context.Context, a handshake.Admission, old handshake.SessionRef) (handshake.Grant, []*recvQ, error) {
	var no handshake.Grant
	if s.closed.Load() {
		return no, nil, fmt.Errorf("%w: server closing", dataplane.ErrUnavailable)
	}
	window, err := wk.SessionWindow(a.Window, DefaultWindow, s.cfg.MaxWindow, len(a.QPs), s.cfg.SessionCap(s.cfg.MaxRecv))
	if err != nil {
		return no, nil, err
	}
	ids, err := s.cfg.PeerIDs(a.QPs)
	if err != nil {
		return no, nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// The caller gave up while waiting for the lock: admitting it
		// now would leave a session nobody knows of.
		return no, nil, fmt.Errorf("%w: connect: %v", dataplane.ErrUnavailable, err)
	}
	// The session being replaced, whose QPs and budget the new one may
	// take (nil: none, or not of this epoch, or gone already).
	prev, _ := wk.Replaced(s.sessions, old, s.cfg.Epoch)
	freed := make([]int, len(s.Workers)) // windows the replaced session frees
	n := len(s.sessions)
	if prev != nil {
		n--
		for i := range prev.peers {
			freed[prev.worker[i]] += prev.window
		}
	}
	if n >= s.cfg.MaxClients {
		return no, nil, fmt.Errorf("%w: %d sessions, the maximum", dataplane.ErrNoCapacity, n)
	}
	for i, id := range ids {
		for _, w := range s.Workers {
			if p := w.peers.Get(id); p != nil && (prev == nil || p.Session != prev.id) {
				return no, nil, fmt.Errorf("%w: QP %v at %v is already connected", dataplane.ErrFailedPrecondition, a.QPs[i].QPN, a.QPs[i].Addr)
			}
		}
	}
	// Assign round-robin, checking every worker's receive budget first.
	assign := make([]uint32, len(ids))
	extra := make([]int, len(s.Workers))
	for i := range ids {
		wi := (s.rr + i) % len(s.Workers)
		assign[i] = uint32(wi)
		extra[wi] += window
	}
	for wi, e := range extra {
		w := s.Workers[wi]
		if b := w.budget + e - freed[wi]; b > s.cfg.MaxRecv {
			return no, nil, fmt.Errorf("%w: worker %d would need %d receive buffers, the maximum is %d", dataplane.ErrNoCapacity, wi, b, s.cfg.MaxRecv)
		}
	}
	s.nextID++
	// The session's own Q_Key: its answers carry it, so no other client
	// (which knows only the request Q_Key and its own) can address them.
	sess := &session{id: s.nextID, name: a.Name, window: window, qkey: verbs.RandomQKey(s.cfg.QKey)}
	reqQKey := s.cfg.QKey
	if !s.cfg.SharedRecv {
		// Its own request QPs, with a Q_Key of their own: no other
		// client can reach (and use up) their receives.
		reqQKey = verbs.RandomQKey(s.cfg.QKey, sess.qkey)
		if err := s.sessionRQs(sess, assign, reqQKey); err != nil {
			return no, nil, err
		}
	}
	admitted, err := wk.AdmitPeers(s.AHs, a.QPs, ids, sess.id, sess.qkey, window, time.Now())
	if err != nil {
		for _, q := range sess.rqs {
			q.close() // never handed to a worker
		}
		return no, nil, err
	}
	for i, p := range admitted {
		sess.peers = append(sess.peers, &peer{Peer: p})
		sess.worker = append(sess.worker, int(assign[i]))
	}
	if prev != nil {
		s.release(prev)
	}
	s.rr = (s.rr + len(ids)) % len(s.Workers)
	for i, p := range sess.peers {
		w := s.Workers[sess.worker[i]]
		w.budget += window
		w.peers.Put(p.ID, p)
	}
	serverQPs := s.Endpoints()
	if s.cfg.SharedRecv {
		for wi, e := range extra {
			if e > 0 {
				s.Workers[wi].want.Store(s.recvTarget(s.Workers[wi].budget))
				s.Workers[wi].wake()
			}
		}
		// Admission means RECVs are posted for the granted window before
		// the client hears yes: otherwise its first requests could find
		// no RECV and be dropped.
		for wi, e := range extra {
			if e > 0 {
				s.awaitRecvs(ctx, s.Workers[wi])
			}
		}
	} else {
		// Each client QP sends to its own request QP, whose receives are
		// posted already; the worker adopts it before its first batch
		// that could hold a completion of it.
		serverQPs = make([]handshake.Endpoint, len(sess.rqs))
		for i, q := range sess.rqs {
			q.peer = sess.peers[i] // its client QP's requests only
			serverQPs[i] = handshake.Endpoint{Addr: q.qp.Address(), QPN: q.qpn}
			assign[i] = uint32(i)
			s.Workers[sess.worker[i]].inbox.add([]*recvQ{q}, nil)
			s.Workers[sess.worker[i]].wake()
		}
	}
	s.sessions[sess.id] = sess
	s.nsessions.Store(int64(len(s.sessions)))
	s.log.Debug("client connected", "session", sess.id, "name", sess.name, "qps", len(ids), "window", window)
	g := handshake.Grant{Session: sess.id, Epoch: s.cfg.Epoch, Window: window, QKey: reqQKey, AnswerQKey: sess.qkey,
		ServerQPs: serverQPs, Assignment: assign, AnswerQPs: s.AnswerQPs, High: s.cfg.Oracle.Current()}
	return g, sess.rqs, nil
}

// sessionRQs creates sess's request QPs, one per client QP on the
// worker assign names, each with exactly its window of receives posted:
// a request that arrives while the window's requests of its client QP
// are all at the server (arrived, not yet answered or dropped) finds
// none and is dropped by the provider. Called with s.mu held, before
// the session's peers exist.
func (s *Server) sessionRQs(sess *session, assign []uint32, qkey uint32) error {
	size := sess.window
	for _, wi := range assign {
		w := s.Workers[wi]
		q, err := s.newSessionRQ(w, size, qkey)
		if err != nil {
			for _, q := range sess.rqs {
				q.close()
			}
			sess.rqs = nil
			return fmt.Errorf("%w: worker %d: a request QP of %d receives: %v", dataplane.ErrNoCapacity, wi, size, err)
		}
		sess.rqs = append(sess.rqs, q)
	}
	return nil
}

func (s *Server) newSessionRQ(w *worker, size int, qkey uint32) (*recvQ, error) {
	qp, err := s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: w.sendCQ, RecvCQ: w.reqCQ, Queue: w.NextQueue(),
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: size, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if err := verbs.BringUpUD(qp, qkey, 0); err != nil {
		qp.Close()
		return nil, err
	}
	q, err := newRecvQ(s.PD, qp, size, size, size)
	if err != nil {
		qp.Close()
		return nil, err
	}
	if err := q.fill(); err != nil || q.posted != size {
		q.close()
		return nil, fmt.Errorf("posted %d of %d receives: %v", q.posted, size, err)
	}
	return q, nil
}

// recvTarget is how many receives a worker whose clients' windows sum to
// budget keeps posted: the windows plus RecvSlack, at most MaxRecv.
func (s *Server) recvTarget(budget int) int64 {
	return int64(min(s.cfg.MaxRecv, budget+s.cfg.RecvSlack))
}

// awaitRecvs waits, bounded, until w has posted the RECVs its budget
// calls for. Called with s.mu held; the worker does not take it.
func (s *Server) awaitRecvs(ctx context.Context, w *worker) {
	want := int64(w.budget)
	deadline := time.Now().Add(2 * time.Second)
	for w.filled.Load() < want {
		if ctx.Err() != nil || time.Now().After(deadline) || s.closed.Load() {
			s.log.Warn("admitting before the worker posted its receives", "worker", w.ID, "posted", w.filled.Load(), "want", want)
			return
		}
		w.wake()
		time.Sleep(50 * time.Microsecond)
	}
}

// AddressHandles is the number of open address handles: those of the
// connected clients' addresses and of addresses left within the grace
// period (ahcache.Grace).
func (s *Server) AddressHandles() int { return s.Pool.AddressHandles(&s.mu) }

// OverrunSessions is the number of connected sessions one of whose own
// request QPs dropped a request because none of its receives was posted:
// only a client that sends beyond its window can cause that, and only on
// its own QPs. ok is false with Config.SharedRecv (no such QPs) or when
// the provider does not count drops per QP.
func (s *Server) OverrunSessions() (n int, ok bool) {
	if s.cfg.SharedRecv || len(s.Workers) == 0 {
		return 0, false
	}
	if _, ok := s.Workers[0].reqQP.(verbs.Counters); !ok {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sess := range s.sessions {
		for _, q := range sess.rqs {
			if d, _ := q.noRecvDrops(); d > 0 {
				n++
				break
			}
		}
	}
	return n, true
}

// Release releases a session of this epoch.
func (s *Server) Release(ctx context.Context, r handshake.SessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := wk.Lookup(s.sessions, r, s.cfg.Epoch, "spec-s0 session")
	if err != nil {
		return err
	}
	s.release(sess)
	return nil
}

// release ends sess: its QPs leave the workers' peer tables and their
// budgets. Called with s.mu held.
func (s *Server) release(sess *session) {
	delete(s.sessions, sess.id)
	s.nsessions.Store(int64(len(s.sessions)))
	now := time.Now()
	for i, p := range sess.peers {
		s.AHs.Put(p.Addr, now) // closed ahcache.Grace later: a worker may hold it in a batch
		w := s.Workers[sess.worker[i]]
		w.budget -= sess.window
		if s.cfg.SharedRecv {
			w.want.Store(s.recvTarget(w.budget))
		}
		w.peers.Delete(p.ID, p)
	}
	for i, q := range sess.rqs { // destroyed by their workers between batches
		w := s.Workers[sess.worker[i]]
		w.inbox.add(nil, []*recvQ{q})
		w.wake()
	}
	s.log.Debug("client disconnected", "session", sess.id, "name", sess.name)
}

// totals are the workers' counters added up (tests).
func (s *Server) totals() wk.Totals { return wk.Total(s.Workers) }

var _ dataplane.Summarizer = (*Server)(nil)

// Stats reports the workers and the data path. Its Counters are the
// metrics seqd_headeronly_*, sessions_overrun among them (a walk of
// every session under s.mu: the metrics' scrape only).
func (s *Server) Stats() dataplane.Stats {
	st := s.Summary()
	if n, ok := s.OverrunSessions(); ok {
		st.Counters = append(st.Counters, dataplane.Counter{Name: "sessions_overrun", Gauge: true, Value: uint64(n),
			Help: "Connected sessions one of whose own request QPs dropped a request for want of a posted receive (the client sent beyond its window)."})
	}
	return st
}

// Summary is Stats without sessions_overrun: what Status reports. It
// takes no lock a Connect holds and walks no session (dataplane.Summarizer).
func (s *Server) Summary() dataplane.Stats {
	st := wk.Sum(s.Workers)
	var noGuess, guardHolds uint64
	for i, w := range s.Workers {
		ws := &w.stats
		x := &st.Workers[i]
		x.SpecMisses, x.Retransmits = ws.specMisses.Load(), ws.dupTags.Load()
		st.SpecMisses += x.SpecMisses
		st.Retransmits += x.Retransmits
		noGuess += ws.noGuess.Load()
		guardHolds += ws.guardHolds.Load()
	}
	// Not under mu: a Connect holds it while its receives are posted,
	// and a Status probe must not wait behind a storm of them.
	st.Sessions = int(s.nsessions.Load())
	st.Counters = append(st.Counters,
		dataplane.Counter{Name: "spec_misses_total", Help: "Answers that carried the full value (wrong guess, no guess or guard hold).", Value: st.SpecMisses},
		dataplane.Counter{Name: "retransmits_seen_total", Help: "Requests repeating the previous tag of their QP (duplicates).", Value: st.Retransmits},
		dataplane.Counter{Name: "no_guess_total", Help: "Requests that carried no guess.", Value: noGuess},
		dataplane.Counter{Name: "guard_holds_total", Help: "Batches answered in full because the aliasing guard held confirmations.", Value: guardHolds})
	return st
}
