package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// maxRedirects bounds how many standby redirects one connect follows per
// known address.
const maxRedirects = 3

// dialAttempt bounds one attempt to dial and connect to one admin
// address: a paused (SIGSTOPped) server accepts TCP but never answers.
const dialAttempt = 500 * time.Millisecond

// admitTry bounds a Connect to an instance that has just answered, as
// the one that serves, the Status before it (or refused a Connect as
// busy): it is alive, so a slow answer is a queue, not a pause, and
// giving up on it wastes the work already done. In the HA storm a third
// of the new leader's Connects reached it with under 0.2 s left of a
// 500 ms try shared with a Status the election had held: the leader
// admitted each, its client had given up, and asked the standbys and the
// leader again, a second wave that ended 1.4 to 1.8 s after the kill.
const admitTry = time.Second

// connectFunc admits the client through the admin connection in hand:
// it asks who serves, bounded by probe (a paused instance costs no more),
// then runs the Connect, bounded by admitTry at least (Client.connect).
type connectFunc func(ctx context.Context, probe time.Duration) error

// adminConn is the client's admin connection and the admin addresses it
// knows (an HA group's instances, and those redirects named). Dial, then
// the engine goroutine, own it; Endpoint may be read from anywhere.
type adminConn struct {
	log      *slog.Logger
	dialOpts []grpc.DialOption
	cc       *grpc.ClientConn
	adm      adminpb.AdminClient
	addrs    []string               // every admin address known
	cur      atomic.Pointer[string] // the one cc is connected to
	// spare keeps, by address, connections to instances that answered
	// but did not admit the client, until it is admitted (connectAny).
	spare map[string]*grpc.ClientConn
	// down: addresses whose last dial failed (a killed instance), until
	// one succeeds. A round tries them last and briefly (downTry).
	down map[string]bool
	// Once the client runs (watchFrom), the connection that admitted it
	// is watched (rewatch): lost is called when it leaves Ready.
	watchCtx context.Context
	lost     func()
	unwatch  context.CancelFunc
}

// watchFrom starts watching the admin connection, and each one a later
// connectAny admits the client through, until ctx ends: lost is called
// whenever it leaves Ready (its server closed it: killed, restarted, gone).
func (a *adminConn) watchFrom(ctx context.Context, lost func()) {
	a.watchCtx, a.lost = ctx, lost
	a.rewatch()
}

// rewatch watches cc, the connection that admitted the client, instead
// of the one before.
func (a *adminConn) rewatch() {
	if a.lost == nil || a.cc == nil {
		return
	}
	if a.unwatch != nil {
		a.unwatch()
	}
	ctx, cancel := context.WithCancel(a.watchCtx)
	a.unwatch = cancel
	go watchConn(ctx, a.cc, a.lost)
}

// watchConn calls lost each time cc is seen out of Ready, until ctx ends
// or cc is closed. A parked goroutine per client: no polling.
func watchConn(ctx context.Context, cc *grpc.ClientConn, lost func()) {
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Shutdown:
			return
		case connectivity.Ready:
		default:
			lost()
		}
		if !cc.WaitForStateChange(ctx, s) {
			return
		}
	}
}

// learn adds an admin address to the ones the client knows.
func (a *adminConn) learn(addr string) {
	if addr != "" && !slices.Contains(a.addrs, addr) {
		a.addrs = append(a.addrs, addr)
	}
}

// endpoint is the admin address cc is connected to.
func (a *adminConn) endpoint() string {
	if p := a.cur.Load(); p != nil {
		return *p
	}
	return ""
}

// connectAny runs connect (a Status, then the mode's Connect): through
// the current admin connection first (unless skipCurrent: it just failed
// to answer), then at the address a standby redirected to, then at every
// known admin address in turn (following redirects as they come), each
// dial and Status bounded by perTry so a paused server costs no more than
// that (an instance that answers has admitTry for the Connect).
// An instance that refuses with a retry-after (its admission control:
// it is busy admitting others) is asked again after that pause,
// jittered, while ctx allows (attempt): the others would only redirect
// to it. On success the admin connection is the one that admitted the
// client.
//
// Connections to the other instances are kept, by address (spare):
// those that answered but did not admit the client (standbys that
// redirected, a leader not elected yet), and, once the client is
// admitted, one opened in the background to every other known instance
// (warm). A failover then asks the standbys, one of which is the new
// leader, through connections that are up already: no TLS handshake. In
// a failover storm a thousand clients each handshaking with every
// instance, again in each retry round, were most of the instances' work
// and starved their leadership leases.
func (a *adminConn) connectAny(ctx context.Context, perTry time.Duration, skipCurrent bool, connect connectFunc) error {
	var lastErr error
	var cands []string
	if a.cc != nil && !skipCurrent {
		err := a.attempt(ctx, perTry, connect)
		if err == nil {
			a.warm()
			a.rewatch()
			return nil
		}
		lastErr = err
		if l := redirectTo(err); l != "" {
			cands = append(cands, l)
		}
	}
	// Every known address, starting after the current one, those that
	// could not be dialed last.
	failed := a.endpoint() // the one that just failed to answer, when skipCurrent
	cands = append(cands, a.order(failed)...)
	tried := map[string]bool{}
	redirected := map[string]bool{} // asked in this round, and redirected
	// slow: asked in this round, and out of time before it answered (a
	// new leader's Connect, held while the group elected it, then queued
	// behind a storm of others).
	slow := map[string]bool{}
	hops := 0
	for len(cands) > 0 && ctx.Err() == nil {
		addr := cands[0]
		cands = cands[1:]
		if tried[addr] || (addr == a.endpoint() && a.cc != nil && !skipCurrent) {
			continue
		}
		tried[addr] = true
		try := perTry
		if a.down[addr] && len(a.addrs) > 1 {
			try = min(perTry, downTry)
		}
		began := time.Now()
		tctx, cancel := context.WithTimeout(ctx, try)
		cc, err := a.dial(tctx, addr)
		cancel()
		if err != nil {
			a.log.Debug("admin dial failed", "admin", addr, "took", time.Since(began), "err", err)
			a.setDown(addr, true)
			if lastErr == nil {
				lastErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			continue
		}
		a.setDown(addr, false)
		// The old connection is kept for its address, unless it just
		// failed to answer (skipCurrent) or was never admitted anywhere.
		oldCC, oldAddr := a.cc, a.endpoint()
		a.cc, a.adm = cc, adminpb.NewAdminClient(cc)
		a.cur.Store(&addr)
		if oldCC != nil {
			if skipCurrent && oldAddr == failed {
				oldCC.Close()
			} else {
				a.keepSpare(oldAddr, oldCC)
			}
		}
		err = a.attempt(ctx, perTry, connect)
		if err == nil {
			a.learn(addr)
			a.warm()
			a.rewatch()
			return nil
		}
		lastErr = err
		a.log.Debug("admin attempt failed", "admin", addr, "took", time.Since(began), "err", err)
		// A redirect to the server that just failed to answer (etcd
		// still names a paused leader) is not followed: it stays last.
		// One to an instance asked earlier in this round is, when that
		// one redirected too: it has been elected since (a failover),
		// and the connection to it is up.
		// One to an instance that ran out of time is followed too: the
		// group names it, so it serves, and a round that ends without
		// it costs the pause before the next (the HA storm: a new
		// leader's held Connect timed out at 520 ms, the standby after it
		// named that leader, and the session reconnected 0.8 s later).
		l := redirectTo(err)
		if isRedirect(err) {
			redirected[addr] = true
		}
		slow[addr] = isDeadline(err)
		if l != "" && (!tried[l] || redirected[l] || slow[l]) && !(skipCurrent && l == failed) && hops < maxRedirects*len(a.addrs) {
			hops++
			a.log.Debug("following redirect", "from", addr, "to", l)
			tried[l], redirected[l], slow[l] = false, false, false
			cands = append([]string{l}, cands...)
		}
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	return lastErr
}

// isDeadline reports whether err is an admin call that ran out of time.
func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// downTry bounds a dial, in a round of several instances, to an address
// whose last dial failed: a killed leader's address took a whole try
// (500 ms to 3 s) in every round of every client, while grpc redialed
// it in the background.
const downTry = 100 * time.Millisecond

// order is the round's candidates: every known address, starting after
// the one that just failed, those whose last dial failed last. Pure.
func (a *adminConn) order(failed string) []string {
	cur := slices.Index(a.addrs, failed)
	out := make([]string, 0, len(a.addrs))
	var down []string
	for i := range a.addrs {
		addr := a.addrs[(cur+1+i)%len(a.addrs)]
		if a.down[addr] {
			down = append(down, addr)
			continue
		}
		out = append(out, addr)
	}
	return append(out, down...)
}

// setDown records whether the last dial of addr failed.
func (a *adminConn) setDown(addr string, down bool) {
	if !down {
		delete(a.down, addr)
		return
	}
	if a.down == nil {
		a.down = map[string]bool{}
	}
	a.down[addr] = true
}

// leaderProbe bounds asking one other instance who leads (leaderMoved):
// a live standby answers in well under a millisecond on a LAN.
const leaderProbe = 100 * time.Millisecond

// leaderMoved asks the other known instances who leads, and reports
// whether one names another leader than the current endpoint: itself
// (role leader), or, as a standby, another address or none (the current
// leader's election key is gone and its successor is not serving yet).
// Standbys that still name the current endpoint, and instances that do
// not answer, leave the question to the next. It asks through the kept
// connections (warm), and keeps any it has to open. (A leader advertised
// under another name than the one the client dialed reads as moved: the
// client then reconnects after one timed-out probe instead of
// slowProbesBeforeReconnect.)
func (a *adminConn) leaderMoved(ctx context.Context) bool {
	cur := a.endpoint()
	for _, addr := range a.addrs {
		if addr == cur {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, leaderProbe)
		cc := a.spare[addr] // kept (warm): no handshake per probe
		if cc == nil || cc.GetState() == connectivity.Shutdown {
			var err error
			if cc, err = adminclient.Dial(tctx, addr, a.dialOpts...); err != nil {
				cancel()
				continue
			}
			a.keepSpare(addr, cc)
		}
		st, err := adminpb.NewAdminClient(cc).Status(tctx, &adminpb.StatusRequest{})
		cancel()
		if err != nil {
			continue
		}
		switch st.GetRole() {
		case adminclient.RoleLeader:
			return true
		case adminclient.RoleStandby:
			if st.GetLeader() != cur {
				return true
			}
		}
	}
	return false
}

// attempt runs connect through the current admin connection, each
// try's Status bounded by perTry. A refusal that carries a retry-after
// is waited out (retryPause: jittered) and the instance asked again,
// while ctx's deadline leaves room for the pause; any other result is
// returned.
func (a *adminConn) attempt(ctx context.Context, perTry time.Duration, connect connectFunc) error {
	for {
		err := connect(ctx, perTry)
		after, busy := retryAfterOf(err)
		if !busy {
			return err
		}
		pause := retryPause(after, rand.Float64())
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < pause {
			return err
		}
		a.log.Debug("admin plane busy; retrying", "admin", a.endpoint(), "after", pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// dial returns an admin connection to addr: the one kept for it when it
// is up or coming up (within ctx), a new one otherwise.
func (a *adminConn) dial(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	if cc, ok := a.spare[addr]; ok {
		delete(a.spare, addr)
		if st := cc.GetState(); st != connectivity.TransientFailure && st != connectivity.Shutdown {
			err := adminclient.WaitReady(ctx, cc)
			if err == nil {
				return cc, nil
			}
			cc.Close()
			return nil, err
		}
		cc.Close()
	}
	return adminclient.Dial(ctx, addr, a.dialOpts...)
}

// warm opens, in the background, a connection to every known instance
// but the current one that has none kept.
func (a *adminConn) warm() {
	cur := a.endpoint()
	for _, addr := range a.addrs {
		if addr == cur || a.spare[addr] != nil {
			continue
		}
		cc, err := adminclient.DialBackground(addr, a.dialOpts...)
		if err != nil {
			a.log.Debug("admin connection to a standby", "admin", addr, "err", err)
			continue
		}
		a.keepSpare(addr, cc)
	}
}

// keepSpare keeps cc, a connection to addr, for the next round.
func (a *adminConn) keepSpare(addr string, cc *grpc.ClientConn) {
	if addr == "" {
		cc.Close()
		return
	}
	if a.spare == nil {
		a.spare = map[string]*grpc.ClientConn{}
	}
	if old, ok := a.spare[addr]; ok && old != cc {
		old.Close()
	}
	a.spare[addr] = cc
}

// dropSpares closes the kept connections.
func (a *adminConn) dropSpares() {
	for addr, cc := range a.spare {
		if cc != a.cc {
			cc.Close()
		}
		delete(a.spare, addr)
	}
}

// close closes every admin connection.
func (a *adminConn) close() {
	if a.unwatch != nil {
		a.unwatch()
	}
	a.dropSpares()
	if a.cc != nil {
		a.cc.Close()
	}
}

// unavailable wraps an admin call's error: a standby's redirect keeps the
// leader it names (redirectTo finds it), a refusal with a retry-after
// its pause (retryAfterOf).
func unavailable(call string, err error) error {
	if leader, ok := adminclient.LeaderFromError(err); ok {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, call, &redirect{leader: leader, err: err})
	}
	if after, ok := adminclient.RetryAfter(err); ok {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, call, &busy{after: after, err: err})
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, call, err)
}

// busy is an instance's refusal that asks for a pause before the next
// try (admission control: it is admitting as many clients as it may).
type busy struct {
	after time.Duration
	err   error
}

func (b *busy) Error() string { return b.err.Error() }

// retryAfterOf is the pause a busy refusal in err's chain asks for.
func retryAfterOf(err error) (time.Duration, bool) {
	var b *busy
	if errors.As(err, &b) {
		return b.after, true
	}
	return 0, false
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

// isRedirect reports whether err is a standby's answer, naming a leader
// or not.
func isRedirect(err error) bool {
	var rd *redirect
	return errors.As(err, &rd)
}

// redirect is a standby's answer to Connect: the leader's admin address,
// "" when it knows none.
type redirect struct {
	leader string
	err    error
}

func (r *redirect) Error() string {
	if r.leader == "" {
		return r.err.Error() // a standby that knows no leader
	}
	return "redirected to the leader at " + r.leader + ": " + r.err.Error()
}
