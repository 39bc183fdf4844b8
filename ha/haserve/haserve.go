// Package haserve runs seqd's data plane under HA leadership: for each term
// an ha.Node wins it opens a fresh oracle over the term's etcd store and
// starts the data-path mode on it; when the term ends it stops both. It is
// the admin.Backend of an HA instance: the leader admits clients, a
// standby answers Connect with a redirect to the leader.
//
// Ordering contracts:
//   - persist BEFORE serve: the oracle of a term is open (its first window
//     saved in etcd, above the stored mark) before the mode starts and
//     before Connect admits anyone;
//   - fence BEFORE expiry: the oracle's gate is the term's, so claims stop
//     at the lease deadline even before the term's teardown runs;
//   - stop BEFORE resign: the term's mode and oracle are closed before the
//     node gives up its election key.
package haserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("haserve: invalid config")

// Config configures a Server.
type Config struct {
	// Node is the instance's HA membership. Required.
	Node *ha.Node
	// Oracle is the template of each term's oracle; Store, Gate and Dir
	// are set per term.
	Oracle oracle.Config
	// Modes is the template of each term's data path; Oracle is set per
	// term. Device is required.
	Modes modes.Config
	// Mode is the mode a new group starts in. A group keeps its mode in
	// etcd: a term starts in the stored one, and SetMode stores it. Atomics
	// is refused: its counter lives in the NIC, which the lease gate cannot
	// fence in time.
	Mode string
	// StatusHold bounds how long an instance that does not serve holds
	// a Status while the group elects a leader (awaitServing). Default
	// DefaultStatusHold; negative: no hold.
	StatusHold time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// DefaultStatusHold is Config.StatusHold's default: about a fast
// failover's takeover (ha.Config.TakeoverAfter). A hold also ends at
// half the time left to the caller's deadline (250 ms of the client
// library's first 500 ms try).
const DefaultStatusHold = 400 * time.Millisecond

// Server is an HA instance's admin backend and term runner.
type Server struct {
	cfg  Config
	node *ha.Node
	log  *slog.Logger

	cur  atomic.Pointer[term]
	mu   sync.Mutex // serializes SetMode with term changes
	mode string

	// serving is closed and replaced whenever cur changes (a term
	// starts or stops serving): awaitServing's waiters look again.
	serving atomic.Pointer[chan struct{}]
	held    atomic.Int32 // Status calls held (awaitServing)

	view   atomic.Pointer[groupView] // a standby's Status: the leader's term and epoch (status.go)
	viewMu sync.Mutex                // one etcd read of the view at a time
}

type term struct {
	t   *ha.Term
	orc *oracle.Oracle
	sw  *modes.Switch
}

var (
	_ admin.Backend          = (*Server)(nil)
	_ admin.ModeSetter       = (*Server)(nil)
	_ admin.Advancer         = (*Server)(nil)
	_ admin.LeaderTransferer = (*Server)(nil)
)

// New validates cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil || cfg.Modes.Device == nil {
		return nil, fmt.Errorf("%w: Node and Modes.Device are required", ErrConfig)
	}
	if cfg.Mode == "" {
		cfg.Mode = spec.ModeSpecS0
	}
	if err := haMode(cfg.Mode); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatusHold == 0 {
		cfg.StatusHold = DefaultStatusHold
	}
	s := &Server{cfg: cfg, node: cfg.Node, log: cfg.Logger.With("component", "haserve"), mode: cfg.Mode}
	ch := make(chan struct{})
	s.serving.Store(&ch)
	return s, nil
}

// Modes are the modes an HA instance serves: every registered mode
// (modes.All) whose values are claimed from the term's oracle, under its
// lease gate (spec.ModeFacts.HA); the table says why the others are left
// out.
var Modes = haModes()

func haModes() []string {
	var ms []string
	for _, m := range modes.All {
		if f, _ := spec.Facts(m); f.HA() {
			ms = append(ms, m)
		}
	}
	return ms
}

// stateMode is the name of the group's mode in its etcd state.
const stateMode = "mode"

func haMode(m string) error {
	if slices.Contains(Modes, m) {
		return nil
	}
	if f, ok := spec.Facts(m); ok && !f.HA() {
		return fmt.Errorf("%w: mode %s cannot run under HA: %s (HA modes: %q)", admin.ErrFailedPrecondition, m, f.NoHA, Modes)
	}
	return fmt.Errorf("%w: unknown mode %q (HA modes: %q)", admin.ErrInvalidArgument, m, Modes)
}

// Run campaigns and serves each term won until ctx is done.
func (s *Server) Run(ctx context.Context) error { return s.node.Run(ctx, s.serveTerm) }

// serveTerm opens the term's oracle (persist BEFORE serve), starts the
// mode, publishes both, and tears them down when the term ends.
func (s *Server) serveTerm(ctx context.Context, t *ha.Term) error {
	oc := s.cfg.Oracle
	if oc.Logger == nil {
		oc.Logger = s.cfg.Logger
	}
	orc, err := t.OpenOracle(ctx, oc)
	if err != nil {
		return err
	}
	if err := s.termMode(ctx, t); err != nil {
		orc.Close()
		return err
	}
	s.mu.Lock()
	mc := s.cfg.Modes
	mc.Oracle = orc
	if mc.QKey == 0 {
		mc.QKey = modes.RandomQKey() // admitted clients learn it at Connect
	}
	if mc.Logger == nil {
		mc.Logger = s.cfg.Logger
	}
	sw, err := modes.New(ctx, mc, s.mode)
	if err != nil {
		s.mu.Unlock()
		orc.Close()
		return fmt.Errorf("haserve: start %s: %w", s.mode, err)
	}
	cur := &term{t: t, orc: orc, sw: sw}
	s.cur.Store(cur)
	s.servingChanged()
	s.mu.Unlock()
	if st, err := sw.Status(ctx); err == nil {
		s.publish(ctx, cur, st.GetEpoch(), st.GetMode())
	}
	s.log.Info("haserve: serving", "mode", sw.Mode(), "term", t.Rev, "first_above", orc.Current(), "mark", orc.Mark())
	<-ctx.Done()
	s.mu.Lock()
	s.cur.Store(nil)
	s.servingChanged()
	s.mu.Unlock()
	sw.Close()
	orc.Close()
	s.log.Info("haserve: stopped serving", "term", t.Rev, "reason", t.Reason())
	return nil
}

// termMode sets s.mode to the group's mode stored in etcd, the mode the
// group last ran in; a group that has none yet (a new one) stores this
// instance's. It runs before the mode starts, so a new leader starts in
// the group's mode, whatever its own -mode says.
func (s *Server) termMode(ctx context.Context, t *ha.Term) error {
	stored, ok, err := t.LoadState(ctx, stateMode)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		if err := t.SaveState(ctx, stateMode, s.mode); err != nil {
			return fmt.Errorf("haserve: storing the group's mode %s: %w", s.mode, err)
		}
		s.log.Info("haserve: the group had no stored mode: stored this instance's", "mode", s.mode)
		return nil
	}
	if err := haMode(stored); err != nil {
		return fmt.Errorf("haserve: the group's stored mode: %w", err)
	}
	if stored != s.mode {
		s.log.Info("haserve: starting in the group's stored mode", "mode", stored, "was", s.mode)
		s.mode = stored
	}
	return nil
}

// leading returns the current term if it is valid.
func (s *Server) leading() *term {
	if c := s.cur.Load(); c != nil && c.t.Valid() {
		return c
	}
	return nil
}

// redirect is the answer of an instance that does not serve.
func (s *Server) redirect() error { return adminclient.RedirectError(s.otherLeader()) }

// otherLeader is the leader as last seen, "" when unknown or when etcd
// names this instance but its term has not started or has ended.
func (s *Server) otherLeader() string {
	l := s.node.Leader()
	if l == s.node.Config().Advertise {
		return ""
	}
	return l
}

// Leader is the advertised address of the leader as last seen, "" when
// unknown.
func (s *Server) Leader() string { return s.node.Leader() }

// IsLeader reports whether this instance serves now.
func (s *Server) IsLeader() bool { return s.leading() != nil }

// Connect admits a client on the leader and redirects it elsewhere,
// after holding the call while the group elects a leader (awaitServing),
// as Status does: after a failover a thousand clients reached the
// leader-elect in the moment before it served (opening its oracle and
// data path), were turned away, and waited out their growing pauses
// (the HA storm: 742 of 1,000 reconnects failed so, the last served
// 4.4 s after the kill).
func (s *Server) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	c := s.leadingOrHeld(ctx)
	if c == nil {
		return nil, s.redirect()
	}
	return c.sw.Connect(ctx, req)
}

// leadingOrHeld is the current term, once the group has a serving
// leader or the hold ends (awaitServing); nil when this instance does
// not serve.
func (s *Server) leadingOrHeld(ctx context.Context) *term {
	if c := s.leading(); c != nil {
		return c
	}
	s.awaitServing(ctx)
	return s.leading()
}

var _ admin.Replacer = (*Server)(nil)

// Replace releases a session of the current term and admits req on the
// leader (admin.Replacer); a standby redirects.
func (s *Server) Replace(ctx context.Context, old *adminpb.DisconnectRequest, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	c := s.leadingOrHeld(ctx)
	if c == nil {
		return nil, s.redirect()
	}
	return c.sw.Replace(ctx, old, req)
}

// Disconnect releases a session of the current term.
func (s *Server) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error {
	c := s.cur.Load()
	if c == nil {
		return fmt.Errorf("%w: session %d (this instance does not lead)", admin.ErrUnknownSession, req.GetSessionId())
	}
	return c.sw.Disconnect(ctx, req)
}

// servingChanged wakes awaitServing's waiters: cur changed.
func (s *Server) servingChanged() {
	ch := make(chan struct{})
	close(*s.serving.Swap(&ch))
}

// electing reports whether the group has no leader that serves, as this
// instance sees it: it does not serve, and etcd names no other leader,
// or names this instance (its term has not started, or has ended), or
// names one whose heartbeat has stopped (ha.Node.LeaderSilent: it is
// being deposed).
func (s *Server) electing() bool {
	return s.leading() == nil && (s.otherLeader() == "" || s.node.LeaderSilent())
}

// awaitServing holds a Status, on an instance that does not serve, while
// the group is electing: until a leader serves here or another is named
// with a live heartbeat, at most Config.StatusHold and half the time
// left to the caller's deadline. After a leader's kill -9 every client asks
// the standbys who leads: held, each learns the new leader the moment it
// is elected, with one call per instance, instead of asking again and
// again with growing pauses (a thousand clients asking were most of the
// election's load, and their pauses most of the failover's length). It
// decides nothing: the answer is read afresh after it.
func (s *Server) awaitServing(ctx context.Context) {
	bound := s.cfg.StatusHold
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl)/2) // the answer's way back gets the other half
	}
	if bound <= 0 || !s.electing() {
		return
	}
	s.held.Add(1)
	defer s.held.Add(-1)
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		lc, sc := s.node.LeaderChanged(), *s.serving.Load()
		if !s.electing() {
			break
		}
		select {
		case <-lc:
		case <-sc:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
	// A leader serves: the calls held here are answered spread over a
	// moment that grows with their number (releaseSpread), not all at
	// once: a thousand answers, and the thousand Status and Connect calls
	// they set off at the new leader, at one instant queued its
	// heartbeat behind them on a loaded machine, and its serving lease
	// lapsed.
	if d := releaseSpread(int(s.held.Load()), rand.Float64()); d > 0 {
		t.Reset(min(d, bound))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// Bounds of releaseSpread.
const (
	releasePerHeld   = 200 * time.Microsecond
	maxReleaseSpread = 200 * time.Millisecond
)

// releaseSpread is the pause of one of held calls released at once,
// for a uniform u in [0, 1): spread over held×releasePerHeld, at most
// maxReleaseSpread. Pure.
func releaseSpread(held int, u float64) time.Duration {
	return time.Duration(u * float64(min(time.Duration(held)*releasePerHeld, maxReleaseSpread)))
}

// Status reports the data path and the term on the leader; a standby
// reports its version, format and mode, the leader's term and the epoch
// it serves in (standbyStatus), after holding the call while the group
// elects a leader (awaitServing).
func (s *Server) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	c := s.leadingOrHeld(ctx)
	if c == nil {
		return s.standbyStatus(ctx), nil
	}
	st, err := c.sw.Status(ctx)
	if err != nil {
		return nil, err
	}
	st.Role, st.Leader, st.Term = adminclient.RoleLeader, s.node.Config().Advertise, uint64(c.t.Rev)
	os := c.orc.Stats()
	st.Current = max(st.Current, os.Current)
	st.PersistedMark = os.Mark
	st.ClockStepsBack = os.ClockStepsBack
	st.PersistStalls = max(st.PersistStalls, os.Stalls)
	return st, nil
}

func (s *Server) currentMode() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// SetMode switches the leader's mode; a standby redirects. The mode is
// stored in etcd first, under the term's guard, so that every later term
// of the group starts in it (kill -9, transfer, restart of the group); a
// deposed leader's store is refused and it redirects.
func (s *Server) SetMode(ctx context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	if err := haMode(req.GetMode()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.leading()
	if c == nil {
		return nil, s.redirect()
	}
	if err := c.t.SaveState(ctx, stateMode, req.GetMode()); err != nil {
		if ha.IsNotLeader(err) {
			return nil, s.redirect()
		}
		return nil, fmt.Errorf("%w: storing mode %s in etcd: %v (not switched)", admin.ErrUnavailable, req.GetMode(), err)
	}
	s.mode = req.GetMode()
	resp, err := c.sw.SetMode(ctx, req)
	if err == nil {
		s.publish(ctx, c, resp.GetEpoch(), resp.GetMode())
	}
	return resp, err
}

// Transfer hands leadership to a standby and returns its address.
func (s *Server) Transfer(ctx context.Context) (string, error) {
	l, err := s.node.Transfer(ctx)
	switch {
	case errors.Is(err, ha.ErrNotLeader):
		return "", fmt.Errorf("%w: %v", admin.ErrFailedPrecondition, err)
	case errors.Is(err, ha.ErrNoStandby):
		return "", fmt.Errorf("%w: %v", admin.ErrFailedPrecondition, err)
	}
	return l, err
}

// TransferLeader is Admin.TransferLeader: Transfer, answered with both
// addresses. A standby answers with a redirect to the leader.
func (s *Server) TransferLeader(ctx context.Context) (*adminpb.TransferLeaderResponse, error) {
	if s.leading() == nil {
		return nil, s.redirect()
	}
	l, err := s.Transfer(ctx)
	if err != nil {
		return nil, err
	}
	return &adminpb.TransferLeaderResponse{PreviousLeader: s.node.Config().Advertise, Leader: l}, nil
}

// Advance moves the leader's counter forward (Admin.Advance); the mark it
// waits for is saved in etcd under the term's guards. A standby redirects.
func (s *Server) Advance(ctx context.Context, to, maxStep uint64) (*adminpb.AdvanceResponse, error) {
	c := s.leading()
	if c == nil {
		return nil, s.redirect()
	}
	return c.sw.Advance(ctx, to, maxStep)
}

// Oracle returns the current term's oracle, nil on a standby.
func (s *Server) Oracle() *oracle.Oracle {
	if c := s.leading(); c != nil {
		return c.orc
	}
	return nil
}

// Collector exports the node's metrics and the current term's oracle and
// mode metrics at scrape time (unchecked: the set changes with the term).
func (s *Server) Collector() prometheus.Collector { return (*dyn)(s) }

type dyn Server

func (d *dyn) Describe(chan<- *prometheus.Desc) {}

func (d *dyn) Collect(ch chan<- prometheus.Metric) {
	s := (*Server)(d)
	for _, c := range s.node.Collectors() {
		c.Collect(ch)
	}
	if c := s.cur.Load(); c != nil {
		for _, col := range c.orc.Collectors() {
			col.Collect(ch)
		}
		c.sw.Collector().Collect(ch)
	}
}
