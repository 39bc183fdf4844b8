package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

const (
	recvSlot    = verbs.GRHLen + 64
	signalEvery = 16
	spinFor     = 30 * time.Microsecond
	// reconnectAfter: with requests outstanding and no answer for this
	// long, the client assumes the server restarted and re-runs Connect.
	// It first asks for the server's epoch: only a new epoch (a restart
	// or a mode switch) makes it reconnect.
	reconnectAfter = 50 * time.Millisecond
	// retryConnectAfter paces reconnects after a failed one, or after an
	// atomics QP broke.
	retryConnectAfter = 5 * time.Millisecond
	// maxRetryConnect caps the backoff between failed reconnects (while
	// an HA group elects a new leader, say). A thousand clients retrying
	// every 100 ms sent 10,000 Status and Connect calls a second to the
	// instances electing a leader; at 1 s (jittered) they send ~1,000.
	maxRetryConnect = time.Second
	// slowProbesBeforeReconnect: Status probes in a row that time out
	// before the client reconnects (keepOnSlowProbe).
	slowProbesBeforeReconnect = 3
)

// Request is one asynchronous request. Callers own it and may reuse it
// once it completed. Set Done (a channel with room for one) or Callback
// before Submit; the engine sends the Request on Done, or calls Callback
// on the engine goroutine (it must not block).
type Request struct {
	// Deadline, if not zero, is when the request fails with ErrTimeout.
	Deadline time.Time
	Done     chan *Request
	Callback func(*Request)

	// TS and Err are the result.
	TS  Timestamp
	Err error

	deadline  time.Duration // engine clock
	floor     uint64
	high      uint64
	qp        int
	abandoned atomic.Bool
	pooled    bool
	next      *Request
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
	// BadQKey counts packets the client's provider dropped because they
	// did not carry the QP's Q_Key: answers forged without the session's
	// answer Q_Key (the provider's drop counter, when it has one).
	BadQKey uint64
}

type stats struct {
	requests, answers, retransmits, stale, specMisses, malformed,
	regressions, timeouts, reconnects, doorbells, forged atomic.Uint64
}

type cqp struct {
	qp       verbs.QP
	win      *spec.Window
	inflight [spec.NumTags]*Request
	granted  int
	server   int // index into server endpoints
	posted   uint64
	done     uint64
	wrs      []verbs.SendWR
}

// Client gets timestamps from one seqd server. Create it with Dial.
type Client struct {
	opts options
	log  *slog.Logger

	cc      *grpc.ClientConn
	adm     adminpb.AdminClient
	addrs   []string               // every admin address known (HA group)
	curAddr atomic.Pointer[string] // the one cc is connected to

	dev    verbs.Device
	pd     verbs.PD
	recvCQ verbs.CQ
	sendCQ verbs.CQ
	recvMR verbs.MR
	qps    []*cqp

	// set by connect, used by the engine
	session uint64
	token   []byte // the session's capability: KeepAlive and Disconnect name it
	epoch   uint64
	qkey    uint32        // the request Q_Key (the server QPs')
	ansQKey uint32        // the session's answer Q_Key, set on every client QP
	srvResp verbs.Senders // the server's response QPs: answers come only from these
	ahs     []verbs.AH
	srvQPN  []verbs.QPN

	start time.Time
	spec  spec.Speculator

	mu            sync.Mutex
	queue         *Request // submitted, LIFO; the engine reverses it
	closed        bool
	wakeCh        chan struct{}
	waiting       atomic.Bool
	kickMu        sync.Mutex
	kick          context.CancelFunc
	kickCtx       atomic.Pointer[context.Context]
	timer         *time.Timer
	backlog, tail *Request

	lease       atomic.Pointer[leaseState] // the session the renewer keeps alive
	sessionLost atomic.Bool                // the server said it no longer holds it

	maxRet atomic.Uint64 // largest value returned
	st     stats
	pool   sync.Pool

	stop     context.CancelFunc
	ctx      context.Context
	doneCh   chan struct{}
	lastAns  time.Duration
	wcs      []verbs.WC
	swcs     []verbs.WC
	expired  []spec.Expired
	retry    []*Request
	recvWRs  []verbs.RecvWR
	recvSGE  []verbs.SGE
	reconnAt time.Duration
	// retryAfter is the pause before the next reconnect after failed
	// ones (nextBackoff: jittered, growing from retryConnectAfter up to
	// maxRetryConnect).
	retryAfter time.Duration
	connFails  int           // reconnects failed in a row
	slowProbes int           // Status probes timed out in a row (keepOnSlowProbe)
	slowAns    time.Duration // lastAns when they began
	// handle names the client's first session in Connect's replaces
	// until a grant names it by token: a first Connect admitted after the
	// client gave up on it is then replaced by the next one.
	handle []byte

	// The data path of the server's mode: Spec-S0 on the QPs above, or
	// an altConn (herd, atomics) built at connect.
	mode       string
	connFailed bool
	modeV      atomic.Value // mode, for Mode()
	alt        altConn
	altReqs    []*Request // by altConn request ID
	altIDs     []int
	altVals    []uint64
	altOK      []bool

	dataIP netip.Addr // the server's data-plane address, from Connect
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
	if err != nil || !c.opts.byRoute || !c.dataIP.IsValid() {
		return c, err
	}
	want, err := routeDevice(c.dataIP)
	if err != nil {
		c.Close()
		return nil, err
	}
	if want == c.opts.device {
		return c, nil
	}
	c.log.Debug("data plane reached from another address: binding there", "server", c.dataIP, "device", want)
	c.Close()
	return dial(ctx, adminAddr, want, opts)
}

// dial is Dial on device (by the route to the admin host when "" and no
// WithDevice).
func dial(ctx context.Context, adminAddr, device string, opts []Option) (_ *Client, err error) {
	c := &Client{start: time.Now(), wakeCh: make(chan struct{}, 1), doneCh: make(chan struct{}),
		handle: make([]byte, adminclient.TokenLen)}
	rand.Read(c.handle) // never fails (crypto/rand aborts the program instead)
	for _, o := range opts {
		if err := o(&c.opts); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if err := c.opts.validate(); err != nil {
		return nil, err
	}
	for _, a := range strings.Split(adminAddr, ",") {
		c.learn(strings.TrimSpace(a))
	}
	for _, a := range c.opts.endpoints {
		c.learn(a)
	}
	if len(c.addrs) == 0 {
		return nil, fmt.Errorf("%w: no admin address", ErrConfig)
	}
	if c.opts.byRoute {
		if device == "" {
			ip, err := hostAddr(ctx, c.addrs[0])
			if err != nil {
				return nil, err
			}
			if device, err = routeDevice(ip); err != nil {
				return nil, err
			}
		}
		c.opts.device = device
	}
	c.log = c.opts.logger
	c.pool.New = func() any { return &Request{Done: make(chan *Request, 1), pooled: true} }
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if err = c.setup(); err != nil {
		return nil, err
	}
	// A first connect may take its time (a loaded server); a paused one
	// must not eat the whole budget when others are known.
	perTry := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		perTry = max(time.Until(dl)/time.Duration(len(c.addrs)), dialAttempt)
	}
	if err = c.connectAny(ctx, perTry, false); err != nil {
		return nil, err
	}
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.newKick()
	go c.engine()
	go c.renew(c.ctx)
	return c, nil
}

// learn adds an admin address to the ones the client knows.
func (c *Client) learn(addr string) {
	if addr != "" && !slices.Contains(c.addrs, addr) {
		c.addrs = append(c.addrs, addr)
	}
}

// Endpoint is the admin address of the server the client is connected to.
func (c *Client) Endpoint() string {
	p := c.curAddr.Load()
	if p == nil {
		return ""
	}
	return *p
}

// connectAny (re-)connects: through the current admin connection first
// (unless skipCurrent: it just failed to answer),
// then at the address a standby redirected to, then at every known admin
// address in turn (following redirects as they come), each attempt
// bounded by perTry so a paused server costs no more than that. On success
// the admin connection is the one that admitted the client.
func (c *Client) connectAny(ctx context.Context, perTry time.Duration, skipCurrent bool) error {
	var lastErr error
	var cands []string
	if c.cc != nil && !skipCurrent {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		err := c.connect(tctx)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if l := redirectTo(err); l != "" {
			cands = append(cands, l)
		}
	}
	// Every known address, starting after the current one.
	failed := c.Endpoint() // the one that just failed to answer, when skipCurrent
	cur := slices.Index(c.addrs, failed)
	for i := range c.addrs {
		cands = append(cands, c.addrs[(cur+1+i)%len(c.addrs)])
	}
	tried := map[string]bool{}
	hops := 0
	for len(cands) > 0 && ctx.Err() == nil {
		addr := cands[0]
		cands = cands[1:]
		if tried[addr] || (addr == c.Endpoint() && c.cc != nil && !skipCurrent) {
			continue
		}
		tried[addr] = true
		tctx, cancel := context.WithTimeout(ctx, perTry)
		cc, err := adminclient.Dial(tctx, addr, c.opts.dialOpts...)
		if err != nil {
			cancel()
			lastErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
			continue
		}
		oldCC := c.cc
		c.cc, c.adm = cc, adminpb.NewAdminClient(cc)
		err = c.connect(tctx)
		cancel()
		if err == nil {
			if oldCC != nil {
				oldCC.Close()
			}
			c.curAddr.Store(&addr)
			c.learn(addr)
			return nil
		}
		// The server answered the dial: keep this connection for the next
		// attempt, which starts with it (one TLS handshake less for a
		// busy server); the old one failed or is elsewhere.
		if oldCC != nil {
			oldCC.Close()
		}
		c.curAddr.Store(&addr)
		lastErr = err
		// A redirect to the server that just failed to answer (etcd
		// still names a paused leader) is not followed: it stays last.
		if l := redirectTo(err); l != "" && !tried[l] && !(skipCurrent && l == failed) && hops < maxRedirects*len(c.addrs) {
			hops++
			c.log.Debug("following redirect", "from", addr, "to", l)
			cands = append([]string{l}, cands...)
		}
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	return lastErr
}

// redirectTo is the leader a standby's refusal names, "" when err is no
// redirect or names no leader.
func redirectTo(err error) string {
	var rd *redirect
	if errors.As(err, &rd) {
		return rd.leader
	}
	return ""
}

func (c *Client) setup() (err error) {
	o := &c.opts
	if c.dev, err = verbs.Open(o.provider, o.device, o.provOpts); err != nil {
		return fmt.Errorf("client: open %s device %q: %w", o.provider, o.device, err)
	}
	if c.pd, err = c.dev.AllocPD(); err != nil {
		return fmt.Errorf("client: protection domain: %w", err)
	}
	perQP := o.window + 16
	if c.recvCQ, err = c.dev.CreateCQ(o.qps * perQP); err != nil {
		return fmt.Errorf("client: receive CQ: %w", err)
	}
	sendDepth := 2*o.window + 2*signalEvery
	if c.sendCQ, err = c.dev.CreateCQ(o.qps * (sendDepth/signalEvery + 1)); err != nil {
		return fmt.Errorf("client: send CQ: %w", err)
	}
	if c.recvMR, err = c.pd.RegMR(o.qps*perQP*recvSlot, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("client: receive buffers: %w", err)
	}
	c.wcs = make([]verbs.WC, 64)
	c.swcs = make([]verbs.WC, 64)
	c.altIDs, c.altVals, c.altOK = make([]int, 64), make([]uint64, 64), make([]bool, 64)
	c.recvWRs = make([]verbs.RecvWR, perQP)
	c.recvSGE = make([]verbs.SGE, perQP)
	for i := range c.recvWRs {
		c.recvWRs[i].SG = c.recvSGE[i : i+1]
	}
	for i := range o.qps {
		qp, err := c.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: c.sendCQ, RecvCQ: c.recvCQ,
			Cap: verbs.QPCap{MaxSendWR: sendDepth, MaxRecvWR: perQP, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("client: QP %d: %w", i, err)
		}
		win, err := spec.NewWindow(spec.WindowConfig{Size: o.window, Timeout: o.retransmit})
		if err != nil {
			qp.Close()
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		q := &cqp{qp: qp, win: win, wrs: make([]verbs.SendWR, o.window)}
		c.qps = append(c.qps, q)
	}
	return nil
}

// postInitialRecvs fills QP i's receive queue (once it is out of RESET).
func (c *Client) postInitialRecvs(i int) error {
	perQP := len(c.recvWRs)
	for s := range perQP {
		c.recvWRs[s].ID = uint64(i)<<32 | uint64(i*perQP+s)
		c.recvSGE[s] = verbs.SGE{Addr: c.recvMR.Addr() + uint64(i*perQP+s)*recvSlot, Length: recvSlot, LKey: c.recvMR.LKey()}
	}
	if _, err := c.qps[i].qp.PostRecv(c.recvWRs); err != nil {
		return fmt.Errorf("client: QP %d: post receives: %w", i, err)
	}
	return nil
}

// connect looks up the server's mode and (re-)connects in it: Spec-S0 on
// the client's UD QPs, or herd / atomics on fresh QPs. Requests in flight
// on a data path that is left go back to the backlog.
func (c *Client) connect(ctx context.Context) error {
	st, err := c.adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		if leader, ok := adminclient.LeaderFromError(err); ok && leader != "" {
			return fmt.Errorf("%w: status: %w", ErrUnavailable, &redirect{leader: leader, err: err})
		}
		return fmt.Errorf("%w: status: %v", ErrUnavailable, err)
	}
	if st.GetRole() == adminclient.RoleStandby {
		err := adminclient.RedirectError(st.GetLeader())
		if l := st.GetLeader(); l != "" {
			return fmt.Errorf("%w: status: %w", ErrUnavailable, &redirect{leader: l, err: err})
		}
		return fmt.Errorf("%w: status: %v", ErrUnavailable, err)
	}
	switch mode := st.GetMode(); mode {
	case "", spec.ModeSpecS0:
		c.closeAlt()
		c.mode = spec.ModeSpecS0
		c.modeV.Store(c.mode)
		return c.connectS0(ctx)
	default:
		c.requeueS0(c.now())
		return c.connectAlt(ctx, mode)
	}
}

// Mode is the data-path mode the client last connected in.
func (c *Client) Mode() string {
	m, _ := c.modeV.Load().(string)
	return m
}

// connectS0 (re-)runs Connect with the client's QPs. It brings the QPs up
// (with the server's Q_Key) and builds the address handles.
func (c *Client) connectS0(ctx context.Context) error {
	req := &adminpb.ConnectRequest{Window: uint32(c.opts.window), Mode: spec.ModeSpecS0,
		ClientName: c.opts.name, ProtocolVersion: spec.ProtocolVersion, Replaces: c.replaces()}
	for _, q := range c.qps {
		a, _ := q.qp.Address().MarshalBinary()
		req.Qps = append(req.Qps, &adminpb.Endpoint{Address: a, Qpn: uint32(q.qp.QPN())})
	}
	sent := c.now() // Connect's high is at least this fresh (PROTOCOL.md)
	resp, err := c.adm.Connect(ctx, req)
	if err != nil {
		if leader, ok := adminclient.LeaderFromError(err); ok && leader != "" {
			return fmt.Errorf("%w: connect: %w", ErrUnavailable, &redirect{leader: leader, err: err})
		}
		return fmt.Errorf("%w: connect: %v", ErrUnavailable, err)
	}
	if len(resp.GetAssignment()) != len(c.qps) || len(resp.GetServerQps()) == 0 || resp.GetWindow() == 0 ||
		len(resp.GetAnswerQps()) == 0 || resp.GetAnswerQkey() == 0 {
		return fmt.Errorf("%w: connect: malformed answer (%d assignments for %d QPs, %d server QPs, window %d, %d answer QPs, answer Q_Key %#x)",
			ErrUnavailable, len(resp.GetAssignment()), len(c.qps), len(resp.GetServerQps()), resp.GetWindow(),
			len(resp.GetAnswerQps()), resp.GetAnswerQkey())
	}
	from, err := senders(resp.GetAnswerQps())
	if err != nil {
		return err
	}
	if err := checkVersion(resp); err != nil {
		return err
	}
	for _, ah := range c.ahs {
		ah.Close()
	}
	c.ahs, c.srvQPN = c.ahs[:0], c.srvQPN[:0]
	for i, ep := range resp.GetServerQps() {
		var a verbs.Address
		if err := a.UnmarshalBinary(ep.GetAddress()); err != nil {
			return fmt.Errorf("%w: connect: server QP %d: %v", ErrUnavailable, i, err)
		}
		ah, err := c.pd.CreateAH(verbs.AHAttr{Dest: a, PortNum: 1})
		if err != nil {
			return fmt.Errorf("client: address handle for %v: %w", a, err)
		}
		c.ahs = append(c.ahs, ah)
		c.srvQPN = append(c.srvQPN, verbs.QPN(ep.GetQpn()))
	}
	for i, q := range c.qps {
		if q.qp.State() == verbs.StateReset {
			if err := verbs.BringUpUD(q.qp, resp.GetAnswerQkey(), 0); err != nil {
				return fmt.Errorf("client: QP %d bring-up: %w", i, err)
			}
			if err := c.postInitialRecvs(i); err != nil {
				return err
			}
		} else if resp.GetAnswerQkey() != c.ansQKey {
			if err := q.qp.Modify(&verbs.QPAttr{QKey: resp.GetAnswerQkey()}, verbs.AttrQKey); err != nil {
				return fmt.Errorf("client: QP %d Q_Key: %w", i, err)
			}
		}
		srv := int(resp.GetAssignment()[i])
		if srv >= len(c.ahs) {
			return fmt.Errorf("%w: connect: assignment %d out of range", ErrUnavailable, srv)
		}
		q.server = srv
		q.granted = min(int(resp.GetWindow()), c.opts.window)
	}
	if c.epoch != resp.GetEpoch() {
		c.spec.Forget()
	}
	c.qkey, c.ansQKey, c.srvResp = resp.GetQkey(), resp.GetAnswerQkey(), from
	c.setSession(resp)
	if h := resp.GetHigh(); h != 0 && h > c.maxRet.Load() {
		c.spec.Learn(sent, h)
	}
	c.log.Debug("connected", "session", c.session, "epoch", c.epoch, "window", resp.GetWindow(), "format", resp.GetFormat())
	return nil
}

func (c *Client) now() time.Duration { return time.Since(c.start) }

func (c *Client) newKick() {
	ctx, cancel := context.WithCancel(c.ctx)
	c.kickMu.Lock()
	c.kick = cancel
	c.kickMu.Unlock()
	c.kickCtx.Store(&ctx)
}

// Submit hands r to the engine. It never blocks; r completes later on
// r.Done or r.Callback.
func (c *Client) Submit(r *Request) error {
	if r.Done == nil && r.Callback == nil {
		return fmt.Errorf("%w: request without Done or Callback", ErrConfig)
	}
	r.TS, r.Err = 0, nil
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("%w: the client is closed", ErrNotConnected)
	}
	r.floor = c.maxRet.Load()
	r.next = c.queue
	c.queue = r
	c.mu.Unlock()
	c.st.requests.Add(1)
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
	if c.waiting.Load() {
		c.kickMu.Lock()
		c.kick()
		c.kickMu.Unlock()
	}
	return nil
}

// GetTimestamp returns a timestamp greater than every timestamp any
// seqd client received before this call began.
func (c *Client) GetTimestamp(ctx context.Context) (Timestamp, error) {
	r := c.pool.Get().(*Request)
	r.Deadline = c.deadline(ctx)
	if err := c.Submit(r); err != nil {
		c.pool.Put(r)
		return 0, err
	}
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
		if err := c.Submit(r); err != nil {
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
	return Stats{Requests: s.requests.Load(), Answers: s.answers.Load(), Retransmits: s.retransmits.Load(),
		StaleAnswers: s.stale.Load(), SpecMisses: s.specMisses.Load(), Malformed: s.malformed.Load(),
		Regressions: s.regressions.Load(), Timeouts: s.timeouts.Load(), Reconnects: s.reconnects.Load(),
		Doorbells: s.doorbells.Load(), Forged: s.forged.Load(), BadQKey: c.providerCounter(verbs.CounterDropBadQKey)}
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
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.stop != nil {
		c.stop()
		<-c.doneCh
	}
	if c.adm != nil && len(c.token) != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.adm.Disconnect(ctx, c.disconnectReq())
		cancel()
	}
	c.release()
	return nil
}

func (c *Client) release() {
	if c.alt != nil {
		c.alt.Close()
		c.alt = nil
	}
	for _, q := range c.qps {
		q.qp.Close()
	}
	for _, ah := range c.ahs {
		ah.Close()
	}
	for _, x := range []interface{ Close() error }{c.recvMR, c.recvCQ, c.sendCQ, c.pd} {
		if x != nil && !isNil(x) {
			x.Close()
		}
	}
	if c.dev != nil {
		c.dev.Close()
	}
	if c.cc != nil {
		c.cc.Close()
	}
}

func isNil(x any) bool {
	switch v := x.(type) {
	case verbs.MR:
		return v == nil
	case verbs.CQ:
		return v == nil
	case verbs.PD:
		return v == nil
	}
	return false
}

// maxRedirects bounds how many standby redirects one connect follows per
// known address.
const maxRedirects = 3

// dialAttempt bounds one attempt to dial and connect to one admin
// address: a paused (SIGSTOPped) server accepts TCP but never answers.
const dialAttempt = 500 * time.Millisecond

// reconnectBudget bounds one reconnect round of the engine (it sends
// nothing meanwhile); a failed round is retried.
const reconnectBudget = 3 * time.Second

// redirect is a standby's answer to Connect: the leader's admin address.
type redirect struct {
	leader string
	err    error
}

func (r *redirect) Error() string {
	return "redirected to the leader at " + r.leader + ": " + r.err.Error()
}
