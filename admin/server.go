package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// Backend is the data plane as the admin server sees it. The data-plane
// server implements it.
//
// The admin server validates every request before calling the backend, so a
// backend sees only well-formed requests. A backend reports failure with the
// sentinel errors of this package wrapped with %w (or with a gRPC status
// error, which passes through unchanged); any other error reaches the caller
// as Internal. Methods may be called concurrently.
type Backend interface {
	// Connect admits a client to the data path. The session ID it returns
	// must not be zero.
	Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error)
	// Disconnect releases a session; ErrUnknownSession when there is none.
	Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error
	// Status reports the oracle, its workers and the data path.
	Status(ctx context.Context) (*adminpb.StatusResponse, error)
}

// Replacer is implemented by backends that swap a client's session in one
// step (ConnectRequest.replaces): Replace releases old, if the data path
// still holds it (CheckEpoch), and admits req under the same lock, so
// that req may take the old session's queue pairs and capacity. When req
// is refused, old is kept. An old naming no session of this data path is
// ignored. For a backend without it the admin server calls Disconnect,
// then Connect: a refused Connect then still released the old session.
type Replacer interface {
	Replace(ctx context.Context, old *adminpb.DisconnectRequest, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error)
}

// ModeSetter is implemented by backends that can switch the data-path
// mode at run time (SetMode). The admin server checks the mode name
// against Config.Modes first.
type ModeSetter interface {
	SetMode(ctx context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error)
}

// Advancer is implemented by backends that can move the counter forward
// for an operator (Advance). The backend refuses a target at or below the
// last value handed out (ErrFailedPrecondition) and one more than maxStep
// above it (ErrInvalidArgument), and answers only once every value handed
// out afterwards is guaranteed above to (persist BEFORE reply).
type Advancer interface {
	Advance(ctx context.Context, to, maxStep uint64) (*adminpb.AdvanceResponse, error)
}

// LeaderTransferer is implemented by HA backends: TransferLeader ends this
// instance's term so that a standby takes over, and names the new leader.
type LeaderTransferer interface {
	TransferLeader(ctx context.Context) (*adminpb.TransferLeaderResponse, error)
}

// Server is the admin gRPC server: the Admin service, the grpc.health.v1
// health service and server reflection, on one listener.
type Server struct {
	cfg     Config
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	backend Backend

	mu   sync.Mutex
	addr net.Addr // set once a listener is known

	sessions *sessions // every session granted: its token, ID, epoch, lease
	quotas   *quotas   // PeerQuota and IdentityQuota: Connect rates, refusals
	// admission bounds the Connects in hand (MaxConnects); see
	// admission.go.
	admission *admission
	advance   *advanceBudget
	stopReap  chan struct{}
	stopOnce  sync.Once
	started   time.Time // when New ran: Status reports the uptime from it
}

// New returns a Server over backend. It validates cfg, filling defaults.
// The server starts out reporting SERVING; see SetServing.
func New(cfg Config, backend Backend) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if backend == nil {
		return nil, fmt.Errorf("admin: nil backend")
	}
	s := &Server{
		started: time.Now(),
		cfg:     cfg,
		log:     cfg.Logger.With("component", "admin"),
		health:  health.NewServer(),
		backend: backend,
		advance: newAdvanceBudget(cfg.AdvanceBudget, cfg.AdvanceWindow, cfg.AdvanceRate, cfg.Format),
	}
	chain := []grpc.UnaryServerInterceptor{s.observe}
	if cfg.Auth != nil {
		chain = append(chain, cfg.Auth.Unary) // authorise BEFORE any handler
	}
	chain = append(chain, s.audit) // after Auth: it logs who asked
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.ChainUnaryInterceptor(chain...),
	}
	s.sessions = newSessions(cfg.SessionLease)
	s.quotas = newQuotas(cfg.PeerQuota, cfg.IdentityQuota)
	s.admission = newAdmission(cfg.MaxConnects)
	if cfg.Creds != nil {
		shed := func() { s.quotas.refuse(cfg.Metrics, ReasonHandshakes, nil) }
		opts = append(opts, grpc.Creds(limitHandshakes(cfg.Creds, cfg.MaxHandshakes, cfg.HandshakeWait, shed)))
	}
	if cfg.SessionLease > 0 {
		s.stopReap = make(chan struct{})
		go s.reap(s.stopReap)
	}
	s.grpc = grpc.NewServer(opts...)
	adminpb.RegisterAdminServer(s.grpc, &service{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.SetServing(true)
	return s, nil
}

// SetServing sets what the health service reports, both for the server as a
// whole (service "") and for adminclient.ServiceName: SERVING when serving is true,
// NOT_SERVING otherwise. After GracefulStop, Shutdown or Stop it has no
// effect and the server reports NOT_SERVING.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(adminclient.ServiceName, st)
}

// Serve serves on lis until the server is stopped, and closes lis. It
// returns nil after GracefulStop, Shutdown or Stop.
func (s *Server) Serve(lis net.Listener) error {
	if s.cfg.Auth == nil && !s.cfg.InsecureNoAuth && !isLoopback(lis.Addr()) {
		lis.Close()
		return fmt.Errorf("%w: %s", ErrNoAuth, noAuthAdvice(lis.Addr().String()))
	}
	s.mu.Lock()
	s.addr = lis.Addr()
	s.mu.Unlock()
	if s.cfg.Auth == nil && !isLoopback(lis.Addr()) {
		s.log.Warn("admin plane off loopback without authorisation (InsecureNoAuth): anyone who reaches it may call Advance, SetMode and TransferLeader", "addr", lis.Addr().String())
	}
	if s.cfg.Creds == nil && !isLoopback(lis.Addr()) {
		s.log.Warn("admin plane serving plaintext on a non-loopback address", "addr", lis.Addr().String())
	}
	s.log.Info("admin plane serving", "addr", lis.Addr().String())
	return s.grpc.Serve(lis)
}

// ListenAndServe listens on Config.Addr and serves there; see Serve. Addr
// reports the bound address as soon as the listener is open.
func (s *Server) ListenAndServe() error {
	lis, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("admin: listen: %w", err)
	}
	return s.Serve(lis)
}

// Addr returns the address the server listens on: the listener's once Serve
// has been called, Config.Addr before that.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr != nil {
		return s.addr.String()
	}
	return s.cfg.Addr
}

// GracefulStop reports NOT_SERVING, stops accepting connections and waits
// for pending RPCs to finish. Open health Watch streams keep it waiting;
// Shutdown bounds the wait.
func (s *Server) GracefulStop() {
	s.stopLeases()
	s.health.Shutdown()
	s.grpc.GracefulStop()
}

// Shutdown stops the server gracefully, as GracefulStop, but stops it hard
// when ctx is done first, and then returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopLeases()
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return ctx.Err()
	}
}

// Stop closes every connection and listener at once, cancelling pending
// RPCs.
func (s *Server) Stop() {
	s.stopLeases()
	s.health.Shutdown()
	s.grpc.Stop()
}

func (s *Server) stopLeases() {
	s.stopOnce.Do(func() {
		if s.stopReap != nil {
			close(s.stopReap)
		}
	})
}

// observe is the unary interceptor that counts Admin requests by method
// and status code.
func (s *Server) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	s.cfg.Metrics.observe(info.FullMethod, status.Code(err))
	return resp, err
}

// service implements adminpb.AdminServer: validate, call the backend, map
// its errors.
type service struct {
	adminpb.UnimplementedAdminServer
	s *Server
}

var _ adminpb.AdminServer = (*service)(nil)

func (v *service) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if err := v.s.cfg.validateConnect(req); err != nil {
		v.s.log.Info("connect refused", "client", req.GetClientName(), "err", err)
		return nil, statusError(err)
	}
	// Admission control: at most MaxConnects in hand; a few more wait
	// briefly, the rest come back after the retry-after their refusal
	// carries, so that the goroutines of the HA election are not queued
	// behind a storm's (admission.go).
	done, err := v.s.admitConnect(ctx)
	if err != nil {
		v.s.log.Debug("connect refused", "client", req.GetClientName(), "reason", ReasonBusy, "err", err)
		return nil, err
	}
	defer done()
	began := time.Now()
	// Admission quotas next: a caller beyond its Connect rate, its
	// sessions or its receives reaches neither the session table nor the
	// backend.
	c := v.s.quotas.callerOf(ctx, v.s.cfg.Auth)
	if wait, ok := v.s.quotas.take(c); !ok {
		reason, err := c.rateError(wait)
		return nil, v.s.refuse(reason, req, err)
	}
	var old *token
	var release *adminpb.DisconnectRequest
	replacesOwn, freed := false, 0
	if r := req.GetReplaces(); len(r) != 0 {
		g, t, found, err := v.s.sessions.claim(r)
		if err != nil {
			return nil, statusError(err)
		}
		defer v.s.sessions.unclaim(r)
		if found {
			old, release = &t, &adminpb.DisconnectRequest{SessionId: g.id, Epoch: g.epoch}
			if replacesOwn = g.owner == c.key; replacesOwn {
				freed = g.recv
			}
		}
	}
	if held, ok := v.s.sessions.reserve(c.key, c.q.MaxSessions, replacesOwn); !ok {
		reason, err := c.sessionsError(held)
		return nil, v.s.refuse(reason, req, err)
	}
	recorded, recv := false, 0
	defer func() {
		if !recorded {
			v.s.sessions.unreserve(c.key, recv)
		}
	}()
	// Receives: the window asked for (none: at most MaxWindow, the
	// mode's default), lowered to what the caller's receive quota has
	// room for.
	qps, asked := len(req.GetQps()), int(req.GetWindow())
	want := asked
	if want <= 0 || want > v.s.cfg.MaxWindow {
		want = v.s.cfg.MaxWindow
	}
	window, held, ok := v.s.sessions.reserveRecv(c.key, c.q.MaxRecv, freed, qps, want)
	if !ok {
		reason, err := c.recvError(held, qps)
		return nil, v.s.refuse(reason, req, err)
	}
	recv = qps * window
	if window < want {
		req.Window = uint32(window)
	}
	// A caller that gave up must not replace a session after a newer
	// Connect of its own did (claim serialises those naming one value).
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	resp, err := v.s.connect(ctx, req, release)
	if err != nil {
		err = statusError(err)
		if status.Code(err) == codes.Unavailable {
			v.s.quotas.refund(c)
		}
		v.s.log.Warn("connect failed", "client", req.GetClientName(), "qps", len(req.GetQps()), "code", status.Code(err).String(), "err", err)
		return nil, err
	}
	if granted := qps * int(resp.GetWindow()); granted != recv {
		v.s.sessions.adjustRecv(c.key, granted-recv)
		recv = granted
	}
	tok, err := v.s.record(ctx, resp, req.GetReplaces(), old, c.key, recv)
	if err != nil {
		return nil, v.s.refuse(ReasonStaleEpoch, req, fmt.Errorf("%w: %w; retry", ErrUnavailable, err))
	}
	recorded = true
	resp.SessionToken = tok[:]
	if ttl := v.s.sessions.ttl; ttl > 0 {
		resp.LeaseMs = uint32(ttl / time.Millisecond)
	}
	v.s.log.Info("client connected", "client", req.GetClientName(), "session", resp.GetSessionId(),
		"qps", len(req.GetQps()), "window", resp.GetWindow(), "mode", resp.GetMode(), "took", time.Since(began).Round(time.Microsecond))
	return resp, nil
}

// record enters the session the backend granted in resp into the
// session table, in epoch order (sessions.add): when the table holds a
// newer epoch, the session, of a data path that is gone, is released
// and the error says so. The backend's Status names the epoch it runs
// when the Connect's differs from the table's.
func (s *Server) record(ctx context.Context, resp *adminpb.ConnectResponse, replaces []byte, old *token, owner string, recv int) (token, error) {
	epoch := resp.GetEpoch()
	for try := 0; ; try++ {
		var v epochView
		gen, settled := s.sessions.view(epoch)
		if !settled && try < 3 {
			if st, err := s.backend.Status(ctx); err == nil && st.GetEpoch() != 0 {
				v = epochView{gen: gen, current: st.GetEpoch(), known: true}
			}
		}
		tok, err := s.sessions.add(resp.GetSessionId(), epoch, time.Now(), replaces, old, owner, recv, v)
		if errors.Is(err, errEpochMoved) {
			continue
		}
		if err != nil {
			rel := &adminpb.DisconnectRequest{SessionId: resp.GetSessionId(), Epoch: epoch}
			if derr := s.backend.Disconnect(ctx, rel); derr != nil && status.Code(statusError(derr)) != codes.NotFound {
				s.log.Warn("releasing a stale-epoch session failed", "session", resp.GetSessionId(), "epoch", epoch, "err", derr)
			}
		}
		return tok, err
	}
}

// refuse counts and logs a Connect refused for reason, and returns err
// as the caller sees it.
func (s *Server) refuse(reason string, req *adminpb.ConnectRequest, err error) error {
	err = statusError(s.quotas.refuse(s.cfg.Metrics, reason, err))
	s.log.Debug("connect refused", "client", req.GetClientName(), "reason", reason, "err", err) // the metric counts them
	return err
}

// connect admits req, releasing the session old names first when it is
// not nil (see Replacer).
func (s *Server) connect(ctx context.Context, req *adminpb.ConnectRequest, old *adminpb.DisconnectRequest) (*adminpb.ConnectResponse, error) {
	if old == nil {
		return s.backend.Connect(ctx, req)
	}
	if r, ok := s.backend.(Replacer); ok {
		return r.Replace(ctx, old, req)
	}
	if err := s.backend.Disconnect(ctx, old); err != nil && status.Code(statusError(err)) != codes.NotFound {
		return nil, err
	}
	return s.backend.Connect(ctx, req)
}

func (v *service) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) (*adminpb.DisconnectResponse, error) {
	if err := validateDisconnect(req); err != nil {
		return nil, statusError(err)
	}
	// The token, never the bare ID, names the session: IDs restart with
	// every data path, so an ID from an older epoch can name another
	// client's session now. The backend releases it only if it still
	// runs the session's epoch.
	g, ok := v.s.sessions.take(req.GetSessionToken())
	if !ok {
		return nil, statusError(fmt.Errorf("%w: no session holds this token (disconnected, expired, or of an earlier epoch)", ErrUnknownSession))
	}
	if err := v.s.backend.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: g.id, Epoch: g.epoch}); err != nil {
		err = statusError(err)
		lvl := slog.LevelWarn
		if status.Code(err) == codes.NotFound {
			lvl = slog.LevelInfo // its data path is gone: an epoch change, as expected
		}
		v.s.log.Log(ctx, lvl, "disconnect failed", "session", g.id, "code", status.Code(err).String(), "err", err)
		return nil, err
	}
	v.s.log.Info("client disconnected", "session", g.id)
	return &adminpb.DisconnectResponse{}, nil
}

// KeepAlive renews the leases of the sessions named by their tokens; see
// Config.SessionLease. Without leases it only reports unknown tokens.
func (v *service) KeepAlive(ctx context.Context, req *adminpb.KeepAliveRequest) (*adminpb.KeepAliveResponse, error) {
	if err := validateTokens(req.GetSessionTokens()); err != nil {
		return nil, statusError(err)
	}
	return &adminpb.KeepAliveResponse{UnknownTokens: v.s.sessions.renew(req.GetSessionTokens(), time.Now())}, nil
}

func (v *service) Status(ctx context.Context, _ *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	resp, err := v.s.backend.Status(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	if resp.GetRole() == "" {
		resp.Role = adminclient.RoleSingle
	}
	resp.UptimeMs = uint64(time.Since(v.s.started) / time.Millisecond)
	return resp, nil
}

func (v *service) Advance(ctx context.Context, req *adminpb.AdvanceRequest) (*adminpb.AdvanceResponse, error) {
	if err := validateAdvance(req); err != nil {
		return nil, statusError(err)
	}
	a, ok := v.s.backend.(Advancer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this server cannot advance its counter")
	}
	to := req.GetMin()
	res, maxStep, err := v.s.reserveAdvance(ctx, to)
	if err != nil {
		err = statusError(err)
		v.s.log.Debug("advance refused", "min", to, "code", status.Code(err).String(), "err", err)
		return nil, err
	}
	resp, err := a.Advance(ctx, to, maxStep)
	var used uint64
	if err == nil && to > resp.GetPrevious() {
		used = to - resp.GetPrevious()
	}
	v.s.advance.settle(res, used)
	if err != nil {
		err = statusError(err)
		v.s.log.Debug("advance failed", "min", to, "code", status.Code(err).String(), "err", err)
		return nil, err
	}
	v.s.log.Info("counter advanced by operator", "min", to, "previous", resp.GetPrevious(), "current", resp.GetCurrent(),
		"step", humanStep(v.s.cfg.Format, used), "budget_left", humanStep(v.s.cfg.Format, v.s.advance.remaining(v.s.cfg.now())))
	return resp, nil
}

// reserveAdvance applies the Advance limits (Config.AdvanceRate,
// AdvanceBudget) to an Advance to to: it takes a call from the rate and
// reserves the step from the budget, and returns the reservation and the
// step bound the backend must enforce, so that the step it takes never
// exceeds the one reserved. The step is measured from the current value
// the backend reports; without one (an HA standby holds no counter: it
// redirects), what the bound and the budget allow is reserved, and the
// unused part given back afterwards.
func (s *Server) reserveAdvance(ctx context.Context, to uint64) (reservation, uint64, error) {
	now := s.cfg.now()
	if err := s.advance.call(now); err != nil {
		s.cfg.Metrics.refusedAdvance(refusedRate)
		return reservation{}, 0, status.Error(codes.ResourceExhausted, err.Error())
	}
	step := min(s.cfg.MaxAdvance, s.advance.remaining(now))
	if st, err := s.backend.Status(ctx); err == nil && st.GetRole() != adminclient.RoleStandby {
		switch cur := st.GetCurrent(); {
		case to <= cur:
			return reservation{}, 0, nil // the backend refuses: never backward
		case to-cur > s.cfg.MaxAdvance:
			return reservation{}, 0, fmt.Errorf("%w: advance: %s is %s above the current value %s, more than one Advance may move it (%s)",
				ErrInvalidArgument, adminclient.Value(s.cfg.Format, to), humanStep(s.cfg.Format, to-cur), adminclient.Value(s.cfg.Format, cur),
				humanStep(s.cfg.Format, s.cfg.MaxAdvance))
		default:
			step = to - cur
		}
	}
	res, err := s.advance.reserve(now, step)
	if err != nil {
		s.cfg.Metrics.refusedAdvance(refusedBudget)
		return reservation{}, 0, status.Error(codes.ResourceExhausted, err.Error())
	}
	return res, step, nil
}

func (v *service) TransferLeader(ctx context.Context, _ *adminpb.TransferLeaderRequest) (*adminpb.TransferLeaderResponse, error) {
	lt, ok := v.s.backend.(LeaderTransferer)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "this server is not part of an HA group: no leadership to transfer")
	}
	resp, err := lt.TransferLeader(ctx)
	if err != nil {
		err = statusError(err)
		v.s.log.Debug("transfer-leader failed", "code", status.Code(err).String(), "err", err)
		return nil, err
	}
	v.s.log.Info("leadership transferred", "from", resp.GetPreviousLeader(), "to", resp.GetLeader())
	return resp, nil
}

func (v *service) SetMode(ctx context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	if m := req.GetMode(); !slices.Contains(v.s.cfg.Modes, m) {
		return nil, statusError(fmt.Errorf("%w: set-mode: unknown mode %q (known: %q)", ErrInvalidArgument, m, v.s.cfg.Modes))
	}
	ms, ok := v.s.backend.(ModeSetter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this server cannot switch modes")
	}
	resp, err := ms.SetMode(ctx, req)
	if err != nil {
		err = statusError(err)
		v.s.log.Debug("set-mode failed", "mode", req.GetMode(), "code", status.Code(err).String(), "err", err)
		return nil, err
	}
	// modes logs the switch and the audit line the call: no third line.
	return resp, nil
}
