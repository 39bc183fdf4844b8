package client

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/internal/hist"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Request is one asynchronous request. Callers own it and may reuse it
// once it completed. Set Done (a channel with room for one) or Callback
// before Submit; the engine sends the Request on Done, or calls Callback
// on the goroutine driving the engine (the engine goroutine, or a caller
// of GetTimestamp driving it alone); it must not block.
type Request struct {
	// Deadline, if not zero, is when the request fails with ErrTimeout.
	Deadline time.Time
	Done     chan *Request
	Callback func(*Request)

	// TS and Err are the result.
	TS  Timestamp
	Err error

	deadline  time.Duration // engine clock
	born      time.Duration // engine clock at Submit, or before it by at most the engine's step (submitClock)
	floor     uint64        // the largest value returned when it was submitted
	n         int           // values asked: > 1 for GetRange (reserve.go), TS the first
	abandoned atomic.Bool
	pooled    bool
	next      *Request
	// own: its caller drives the engine for it (driveOwn), and finish
	// sets ownDone instead of sending on Done (no channel hand-off on a
	// lone caller's round trip). Both guarded by Client.drive.
	own, ownDone bool
	// counted: a coalesced caller counted in Stats.Requests (coalesce.go).
	counted bool
}

// Stats are the client's counters.
type Stats struct {
	Requests, Answers, Retransmits, StaleAnswers, SpecMisses, Malformed,
	Regressions, Timeouts, Reconnects, Doorbells uint64
	// Forged counts answers dropped because they came from a QP or
	// address other than the server's response QPs named at Connect.
	// (Answers without the session's Q_Key never reach the client: the
	// provider drops them, and counts them as bad-Q_Key drops.)
	Forged uint64
	// LateAnswers counts the StaleAnswers known to have reached the host
	// before the request outstanding under their tag was sent: answers
	// to an earlier use of the tag, held up past its quarantine (Spec-S0,
	// on a provider that bounds its receive stamps).
	LateAnswers uint64
	// BadQKey counts packets the client's provider dropped because they
	// did not carry the QP's Q_Key: answers forged without the session's
	// answer Q_Key (the provider's drop counter, when it has one).
	BadQKey uint64
	// Completed counts requests completed, with a value or an error;
	// Failed those completed with an error (Timeouts and Regressions
	// among them). Requests - Completed are in flight.
	Completed, Failed uint64
	// Latency is the time from Submit to completion of every request
	// completed (seconds); BatchSizes the requests posted per doorbell.
	Latency, BatchSizes Histogram
}

// InFlight is the number of requests submitted and not yet completed.
func (s Stats) InFlight() uint64 { return s.Requests - min(s.Completed, s.Requests) }

// Histogram is a histogram read at one moment: bucket upper bounds, the
// count in each bucket (not cumulative; the last one counts values above
// every bound), the total count and sum.
type Histogram = hist.Snapshot

// LatencyBounds are the latency histogram's bucket bounds: 2 µs to ~8 s.
var LatencyBounds = hist.Exponential(2000, 2, 23)

// BatchBounds are the batch-size histogram's bucket bounds: 1 to 4096.
var BatchBounds = hist.Exponential(1, 2, 13)

type stats struct {
	requests, answers, retransmits, stale, specMisses, malformed,
	regressions, timeouts, reconnects, doorbells, forged, late,
	completed, failed atomic.Uint64
	driven         atomic.Uint64   // GetTimestamp calls that drove the engine themselves
	latency, batch *hist.Histogram // nanoseconds; requests per doorbell
}

func newStats() stats {
	return stats{latency: hist.New(LatencyBounds), batch: hist.New(BatchBounds)}
}

// doorbell counts one posted chain of n requests.
func (s *stats) doorbell(n int) {
	s.doorbells.Add(1)
	if s.batch != nil {
		s.batch.Observe(uint64(n))
	}
}

// Client gets timestamps from one seqd server (or the leader of an HA
// group). Create it with Dial.
//
// Its parts and who owns them: admin (the admin connection and the
// addresses known), sess (the session granted) and eng (the data path:
// one transport, the requests in flight and the backlog) belong to Dial,
// then to the engine goroutine; sub is where callers hand requests to
// the engine; lease is the renewer goroutine's.
type Client struct {
	opts  options
	log   *slog.Logger
	start time.Time

	dev verbs.Device
	pd  verbs.PD

	admin adminConn
	sess  session
	lease lease
	sub   submissions
	co    coalescer // callers coalesced into ranged requests (coalesce.go)
	// drive is held by whoever drives the engine (eng and its
	// transport): the engine goroutine, or a lone caller (driveOwn).
	drive sync.Mutex
	eng   engine
	mode  atomic.Value // the mode last connected in, for Mode()
	// leads is what the last Status said of the instance the client
	// is connecting to, while a Connect there is retried after a busy
	// refusal (connect): owned by the goroutine that connects.
	leads leaderSeen

	maxRet atomic.Uint64 // largest value returned
	st     stats
	pool   sync.Pool

	ctx    context.Context
	stop   context.CancelFunc
	doneCh chan struct{}
}

// submissions is where callers queue requests for the engine, and how
// they wake it.
type submissions struct {
	mu    sync.Mutex
	queue *Request // submitted, LIFO; the engine reverses it
	// has is queue != nil, set under mu: the engine's intake, once per
	// step of a spinning poll, takes no lock while nothing was submitted.
	has     atomic.Bool
	closed  bool
	wakeCh  chan struct{}
	waiting atomic.Bool // the engine sleeps in CQ.Wait
	idle    atomic.Bool // the engine goroutine idles (waits on wakeCh)
	// adminLost: the admin connection that admitted the session left
	// Ready (adminConn.watchFrom); the engine probes the server.
	adminLost atomic.Bool
	kickMu    sync.Mutex
	kick      context.CancelFunc
	kickCtx   atomic.Pointer[context.Context]
	// timer kicks a sleeping engine when a retransmission is due
	// (Client.sleep).
	timer *time.Timer
	// clock is the engine goroutine's clock reading at the start of its
	// latest step while it polls (0 while it idles, sleeps or
	// reconnects): Submit takes it for a request's birth instead of
	// reading the clock (submitClock).
	clock atomic.Int64
}

// Dial connects to the seqd admin server at adminAddr, creates the
// client's queue pairs on its own verbs device and admits them with
// Connect.
//
// adminAddr may list several comma-separated admin addresses, the
// instances of an HA group (WithEndpoints adds more): Dial tries them in
// turn and follows a standby's redirect to the leader. Once connected the
// client follows leader changes on its own: when its server stops
// answering, or answers as a standby, it finds the leader (the redirect,
// then every known address), connects again and resends the calls in
// flight under fresh tags; a call fails only at its deadline.
//
// Unless WithDevice chose a device, the client binds the soft provider
// to the local address of its route to the server: first the route to
// the admin host, then, if the server's data plane (named in Connect's
// answer) is reached from another local address, again on that one.
func Dial(ctx context.Context, adminAddr string, opts ...Option) (*Client, error) {
	c, err := dial(ctx, adminAddr, "", opts)
	if err != nil || !c.opts.byRoute || !c.sess.dataIP.IsValid() {
		return c, err
	}
	want, err := routeDevice(c.sess.dataIP)
	if err != nil {
		c.Close()
		return nil, err
	}
	if want == c.opts.device {
		return c, nil
	}
	c.log.Debug("data plane reached from another address: binding there", "server", c.sess.dataIP, "device", want)
	c.Close()
	return dial(ctx, adminAddr, want, opts)
}

// dial is Dial on device (by the route to the admin host when "" and no
// WithDevice).
func dial(ctx context.Context, adminAddr, device string, opts []Option) (_ *Client, err error) {
	c := &Client{start: time.Now(), doneCh: make(chan struct{}), sess: newSession(), st: newStats()}
	c.sub.wakeCh = make(chan struct{}, 1)
	for _, o := range opts {
		if err := o(&c.opts); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if err := c.opts.validate(); err != nil {
		return nil, err
	}
	c.log = c.opts.logger
	c.admin.log, c.admin.dialOpts = c.log, c.opts.dialOpts
	for _, a := range strings.Split(adminAddr, ",") {
		c.admin.learn(strings.TrimSpace(a))
	}
	for _, a := range c.opts.endpoints {
		c.admin.learn(a)
	}
	if len(c.admin.addrs) == 0 {
		return nil, fmt.Errorf("%w: no admin address", ErrConfig)
	}
	if c.opts.byRoute {
		if device == "" {
			ip, err := hostAddr(ctx, c.admin.addrs[0])
			if err != nil {
				return nil, err
			}
			if device, err = routeDevice(ip); err != nil {
				return nil, err
			}
		}
		c.opts.device = device
	}
	c.pool.New = func() any { return &Request{Done: make(chan *Request, 1), pooled: true} }
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	o := &c.opts
	if c.dev, err = verbs.Open(o.provider, o.device, o.provOpts); err != nil {
		return nil, fmt.Errorf("client: open %s device %q: %w", o.provider, o.device, err)
	}
	if c.pd, err = c.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("client: protection domain: %w", err)
	}
	c.initEngine()
	c.co.init(c.opts.coalesce, coalesceEnv{send: c.submit, now: c.now, defTimeout: c.opts.timeout, start: c.start, pool: &c.pool, st: &c.st})
	// A first connect may take its time (a loaded server); a paused one
	// must not eat the whole budget when others are known.
	perTry := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		perTry = max(time.Until(dl)/time.Duration(len(c.admin.addrs)), dialAttempt)
	}
	if err = c.admin.connectAny(ctx, perTry, false, c.connect); err != nil {
		return nil, err
	}
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.newKick()
	c.admin.watchFrom(c.ctx, c.adminLost)
	c.run()
	go c.lease.renew(c.ctx, c.log, c.kickNow)
	return c, nil
}

// initEngine gives the engine the client's counters, largest value
// returned, request pool, logger and default timeout.
func (c *Client) initEngine() {
	c.eng.init(engineEnv{st: &c.st, maxRet: &c.maxRet, pool: &c.pool, log: c.log, defTimeout: c.opts.timeout, start: c.start})
}

// Endpoint is the admin address of the server the client is connected to.
func (c *Client) Endpoint() string { return c.admin.endpoint() }

// connect looks up the server's mode, in a Status bounded by probe, and
// (re-)connects in it through that mode's dialer (transports), bounded by
// admitTry at least: the instance answered, so it is alive (connectFunc).
// Requests in flight go back to the backlog first, to be sent again on
// the new data path.
func (c *Client) connect(ctx context.Context, probe time.Duration) (err error) {
	addr := c.admin.endpoint()
	mode, ok := c.leads.mode(addr)
	defer func() {
		// Kept only for a retry after a busy refusal (admission
		// control); anything else asks again.
		if _, busy := retryAfterOf(err); !busy {
			c.leads = leaderSeen{}
		}
	}()
	if !ok {
		sctx, cancel := context.WithTimeout(ctx, probe)
		st, err := c.admin.adm.Status(sctx, &adminpb.StatusRequest{})
		cancel()
		if err != nil {
			return unavailable("status", err)
		}
		if st.GetRole() == adminclient.RoleStandby {
			return unavailable("status", adminclient.RedirectError(st.GetLeader()))
		}
		if mode = st.GetMode(); mode == "" {
			mode = spec.ModeSpecS0
		}
		c.leads = leaderSeen{addr: addr, m: mode}
	}
	d := transports[mode]
	if d == nil {
		return fmt.Errorf("%w: the server runs mode %q, which this client does not speak", ErrUnavailable, mode)
	}
	c.eng.requeue()
	ctx, cancel := context.WithTimeout(ctx, max(probe, admitTry))
	defer cancel()
	env := &transportEnv{dev: c.dev, pd: c.pd, qps: c.opts.qps, window: c.opts.window, retransmit: c.opts.retransmit,
		rfpReads: c.opts.rfpReads, single: c.opts.coalesce == 0, cc: c.opts.cc, linkRate: c.opts.linkRate, name: c.opts.name, connect: c.admit, st: &c.st, prev: c.eng.tr, log: c.log, now: c.now, start: c.start}
	tr, err := d(ctx, env)
	if err != nil {
		return err
	}
	if c.eng.tr != nil && c.eng.tr != tr {
		c.eng.tr.Close()
	}
	c.eng.use(tr, mode)
	c.mode.Store(mode)
	facts, _ := spec.Facts(mode)
	c.co.ranged.Store(facts.Ranges)
	c.log.Debug("connected", "mode", mode, "session", c.sess.id, "epoch", c.sess.epoch)
	return nil
}

// leaderSeen is an instance that answered a Status as the one that
// serves, in mode. A Connect refused there as busy (admission control)
// is retried without asking again: in a failover storm each client is
// refused a few times, and each Status was one more call to the busy
// leader. A Connect to an instance that no longer serves is refused
// with a redirect like the Status would have been.
type leaderSeen struct{ addr, m string }

func (l leaderSeen) mode(addr string) (string, bool) {
	return l.m, l.addr != "" && l.addr == addr
}

// admit is transportEnv.connect: the admin Connect for a mode's request,
// with the protocol version, the client's name and the session it
// replaces filled in; the reply's version checked; the session recorded.
func (c *Client) admit(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	req.ProtocolVersion, req.ClientName, req.Replaces = spec.ProtocolVersion, c.opts.name, c.sess.replaces()
	resp, err := c.admin.adm.Connect(ctx, req)
	if err != nil {
		return nil, unavailable("connect", err)
	}
	if err := checkVersion(resp); err != nil {
		return nil, err
	}
	c.sess.set(resp)
	c.lease.publish(c.admin.adm, resp)
	return resp, nil
}

// Mode is the data-path mode the client last connected in.
func (c *Client) Mode() string {
	m, _ := c.mode.Load().(string)
	return m
}

func (c *Client) now() time.Duration { return time.Since(c.start) }

func (c *Client) newKick() {
	ctx, cancel := context.WithCancel(c.ctx)
	c.sub.kickMu.Lock()
	c.sub.kick = cancel
	c.sub.kickMu.Unlock()
	c.sub.kickCtx.Store(&ctx)
}

func (c *Client) kickNow() {
	c.sub.kickMu.Lock()
	if c.sub.kick != nil {
		c.sub.kick()
	}
	c.sub.kickMu.Unlock()
}

// Submit hands r to the engine. It never blocks; r completes later on
// r.Done or r.Callback. With coalescing on, in a mode that serves ranges
// (WithCoalescing), r may wait for the request in flight to complete and
// go out with the other requests submitted meanwhile, as one ranged
// request.
func (c *Client) Submit(r *Request) error {
	if r.Done == nil && r.Callback == nil {
		return fmt.Errorf("%w: request without Done or Callback", ErrConfig)
	}
	if r.n <= 1 && c.co.active() {
		return c.co.submit(r)
	}
	return c.submit(r)
}

// submit is Submit without coalescing.
func (c *Client) submit(r *Request) error {
	if err := c.enqueue(r); err != nil {
		return err
	}
	// A busy engine takes r in on its next step: no wake-up.
	if c.sub.idle.Load() {
		c.wakeEngine()
	}
	if c.sub.waiting.Load() {
		c.kickNow()
	}
	return nil
}

// begin starts r: no result yet, the floor its value must exceed (every
// value returned before the call), and its birth on the client's clock,
// which it returns. The request counts from here.
func (c *Client) begin(r *Request) time.Duration {
	now := c.submitClock()
	c.eng.begin(r, now)
	return now
}

// enqueue queues r for the engine, without waking it.
func (c *Client) enqueue(r *Request) error {
	s := &c.sub
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("%w: the client is closed", ErrNotConnected)
	}
	c.begin(r)
	r.next = s.queue
	s.queue = r
	s.has.Store(true)
	s.mu.Unlock()
	return nil
}

// adminLost is called when the admin connection that admitted the
// session leaves Ready: its server closed it (killed, restarted, gone).
// The engine then probes the server at once, even with no call in
// flight, and reconnects when the session is lost: after a failover an
// idle session is connected again before its next call, instead of
// finding out on that call.
func (c *Client) adminLost() {
	c.sub.adminLost.Store(true)
	c.wakeEngine()
}

// wakeEngine wakes the engine goroutine if it idles.
func (c *Client) wakeEngine() {
	select {
	case c.sub.wakeCh <- struct{}{}:
	default:
	}
}

// GetTimestamp returns a timestamp greater than every timestamp any
// seqd client received before this call began.
//
// A caller alone (nothing else in flight) drives the engine itself, on
// its own goroutine (driveOwn); otherwise it hands its request to the
// engine goroutine and waits. With coalescing on, in a mode that serves
// ranges (WithCoalescing), callers that come while a request is in
// flight wait for it and then go out together, as one ranged request,
// each with its own value of the range (coalesce.go).
func (c *Client) GetTimestamp(ctx context.Context) (Timestamp, error) {
	r := c.pool.Get().(*Request)
	// No deadline: the engine's default timeout from when it takes r in.
	r.Deadline, _ = ctx.Deadline()
	if c.co.active() {
		return c.getCoalesced(ctx, r)
	}
	return c.getOne(ctx, r)
}

// getOne is GetTimestamp for r alone, not coalesced.
func (c *Client) getOne(ctx context.Context, r *Request) (Timestamp, error) {
	if c.drive.TryLock() {
		if ts, ok, err := c.driveOwn(ctx, r); ok {
			return ts, err
		}
	}
	if err := c.submit(r); err != nil {
		c.pool.Put(r)
		return 0, err
	}
	return c.wait(ctx, r)
}

// wait waits for r (from the pool) to complete, or for ctx.
func (c *Client) wait(ctx context.Context, r *Request) (Timestamp, error) {
	select {
	case <-r.Done:
		ts, err := r.TS, r.Err
		c.pool.Put(r)
		return ts, err
	case <-ctx.Done():
		r.abandoned.Store(true) // the engine recycles it
		return 0, ctxError(ctx.Err())
	}
}

// GetTimestamps fills dst with timestamps, requested together (one chain).
func (c *Client) GetTimestamps(ctx context.Context, dst []Timestamp) error {
	var local [64]*Request
	reqs := local[:0]
	if len(dst) > len(local) {
		reqs = make([]*Request, 0, len(dst))
	}
	dl := c.deadline(ctx)
	done := make(chan *Request, len(dst))
	for range dst {
		r := &Request{Deadline: dl, Done: done}
		if err := c.submit(r); err != nil { // one chain: not coalesced
			return err
		}
		reqs = append(reqs, r)
	}
	for range dst {
		select {
		case <-done:
		case <-ctx.Done():
			for _, r := range reqs {
				r.abandoned.Store(true)
			}
			return ctxError(ctx.Err())
		}
	}
	for i, r := range reqs {
		if r.Err != nil {
			return r.Err
		}
		dst[i] = r.TS
	}
	return nil
}

// deadline is when a call with ctx fails: ctx's deadline, or, when ctx
// has none, WithTimeout's default from now.
func (c *Client) deadline(ctx context.Context) time.Time {
	if cd, ok := ctx.Deadline(); ok {
		return cd
	}
	return time.Now().Add(c.opts.timeout)
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := &c.st
	st := Stats{Requests: s.requests.Load(), Answers: s.answers.Load(), Retransmits: s.retransmits.Load(),
		StaleAnswers: s.stale.Load(), LateAnswers: s.late.Load(), SpecMisses: s.specMisses.Load(), Malformed: s.malformed.Load(),
		Regressions: s.regressions.Load(), Timeouts: s.timeouts.Load(), Reconnects: s.reconnects.Load(),
		Doorbells: s.doorbells.Load(), Forged: s.forged.Load(), BadQKey: c.providerCounter(verbs.CounterDropBadQKey),
		Completed: s.completed.Load(), Failed: s.failed.Load()}
	if s.latency != nil {
		st.Latency, st.BatchSizes = s.latency.Snapshot(1e-9), s.batch.Snapshot(1)
	}
	return st
}

// providerCounter reads one of the client device's counters (0 when the
// provider keeps none).
func (c *Client) providerCounter(name string) uint64 {
	var v uint64
	if cs, ok := c.dev.(verbs.Counters); ok {
		cs.VisitCounters(func(n string, x uint64) {
			if n == name {
				v = x
			}
		})
	}
	return v
}

// Close disconnects and releases the client. Pending requests fail with
// ErrNotConnected.
func (c *Client) Close() error {
	c.sub.mu.Lock()
	if c.sub.closed {
		c.sub.mu.Unlock()
		return nil
	}
	c.sub.closed = true
	c.sub.mu.Unlock()
	if c.stop != nil {
		c.stop()
		<-c.doneCh
	}
	if c.admin.adm != nil && len(c.sess.token) != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.admin.adm.Disconnect(ctx, c.sess.disconnectReq())
		cancel()
	}
	c.release()
	return nil
}

func (c *Client) release() {
	if c.eng.tr != nil {
		c.eng.tr.Close()
		c.eng.tr = nil
	}
	if c.pd != nil {
		c.pd.Close()
	}
	if c.dev != nil {
		c.dev.Close()
	}
	c.admin.close()
}
