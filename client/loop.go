package client

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// The Client is the engine's shell: the goroutine (or the lone caller)
// that polls the transport, blocks in its CQ, reads the clock, takes
// submitted requests in, and runs the admin plane's probes and
// reconnects. The decisions are the engine's (engine.go).

// run starts the engine goroutine. The wake-up timer and the clock exist
// before: a lone caller may drive the engine as soon as run returns.
func (c *Client) run() {
	e := &c.eng
	c.sub.timer = time.AfterFunc(time.Hour, c.kickNow)
	e.lastAns = c.now()
	c.drive.Lock()
	go c.engine()
}

// engine is the goroutine that drives the transport. It holds c.drive
// whenever it touches the engine's state, and lets go of it only while
// idle (nothing in flight or queued), when a lone caller may drive the
// engine itself (driveOwn). At the end it keeps c.drive: no caller
// drives a closed client.
func (c *Client) engine() {
	defer close(c.doneCh)
	e := &c.eng
	defer c.sub.timer.Stop()
	sp := newSpin(false)
	defer sp.stop()
	for c.ctx.Err() == nil {
		now := c.now()
		c.sub.clock.Store(int64(now))
		did := c.intake(now)
		if e.connFailed {
			e.expireBacklog(now)
		} else {
			did = e.step(now) || did
		}
		if due, force := e.reconnectDue(now, c.sub.adminLost.Load()); due {
			c.sub.clock.Store(0) // a reconnect takes its time
			c.reconnect(now, force)
		}
		if did {
			sp.stop()
			continue
		}
		if !e.busy() {
			sp.stop()
			c.sub.clock.Store(0)
			// Submit wakes the engine only while idle is set; a
			// request queued before it was set is seen here.
			c.sub.idle.Store(true)
			if !c.queued() {
				c.drive.Unlock()
				// A failed reconnect is retried with nothing to send
				// too: the session was lost (adminLost), and the next
				// call should find it connected again.
				var retry *time.Timer
				var retryC <-chan time.Time
				if e.connFailed {
					retry = time.NewTimer(max(e.retryAfter, retryConnectAfter) - (now - e.reconnAt))
					retryC = retry.C
				}
				select {
				case <-c.sub.wakeCh:
				case <-retryC:
				case <-c.ctx.Done():
				}
				if retry != nil {
					retry.Stop()
				}
				c.drive.Lock()
			}
			c.sub.idle.Store(false)
			continue
		}
		if sp.at(now) < e.loopSpinFor() {
			sp.pause()
			continue
		}
		sp.stop()
		c.sub.clock.Store(0)
		c.sleep(now)
	}
	c.sub.clock.Store(0)
	c.failAll(ErrNotConnected)
}

// driveOwn is GetTimestamp's lone-caller fast path, entered with c.drive
// held: when the engine is idle (nothing in flight or queued, the data
// path up), the caller submits r and drives the engine on its own
// goroutine (send, poll with a short spin, then block in the CQ's Wait)
// until r completes, with no hand-off to the engine goroutine. Requests
// other callers submit meanwhile are taken in and sent too; whatever is
// left when r completes goes back to the engine goroutine, as does r
// itself when the data path needs a reconnect or the client closes. It
// releases c.drive, and returns r (from the pool) to the pool unless the
// engine recycles it. ok is false when the engine was not idle: r was not
// submitted.
func (c *Client) driveOwn(ctx context.Context, r *Request) (ts Timestamp, ok bool, err error) {
	e := &c.eng
	if e.connFailed || e.tr == nil || e.tr.Broken() || e.busy() || c.ctx.Err() != nil {
		c.leave()
		return 0, false, nil
	}
	c.st.driven.Add(1)
	// The caller's goroutine stays on its thread while it drives: when
	// the runtime preempts a goroutine that spins (every 10 ms), a thread
	// woken to look for work could take it up, on the core of another
	// process's poller. Serial GetTimestamp against the raw ping-pong,
	// median of 8 interleaved rounds: 1.242 with the lock, 1.276 without.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	now := c.takeOwn(r)
	r.own, r.ownDone = true, false
	c.intake(now) // requests other callers submitted meanwhile
	sp := newSpin(true)
	defer sp.stop()
	did := e.dispatch(now) // nothing is in flight: send before the first poll
	e.setDue()
	for {
		if r.ownDone { // finish ran on this goroutine, in step
			r.own = false
			c.leave()
			ts, err := r.TS, r.Err
			c.pool.Put(r)
			return ts, true, err
		}
		if ctx.Err() != nil {
			r.own = false
			r.abandoned.Store(true) // the engine recycles it
			c.leave()
			return 0, true, ctxError(ctx.Err())
		}
		if c.ctx.Err() != nil || e.tr.Broken() || now-e.lastAns > reconnectAfter {
			r.own = false // completed on Done from now on
			c.leave()     // the engine goroutine reconnects, or fails r at Close
			sp.stop()     // no tight place held while blocked
			ts, err := c.wait(ctx, r)
			return ts, true, err
		}
		switch {
		case did:
			sp.stop()
		case sp.at(now) < e.spinFor():
			sp.pause()
		default:
			sp.stop()
			c.sleepFor(ctx, now)
		}
		now = c.now()
		did = c.pollOwn(now)
	}
}

// pollOwn is one poll of a caller driving the engine (driveOwn). It runs
// the full step (intake, answers, expiry, dispatch) only when the poll
// found something, a request was submitted, or a scan or retransmission
// is due (e.due); otherwise the poll is all it does, so that the wait
// for the answer is a tight loop round the provider's poll.
func (c *Client) pollOwn(now time.Duration) bool {
	e := &c.eng
	n := e.tr.Poll(now, e.res)
	if n == 0 && now < e.due && !c.sub.has.Load() {
		if e.afterStep != nil {
			e.afterStep() // a step of one poll
		}
		return false
	}
	c.intake(now)
	did := e.stepWith(now, n)
	e.setDue()
	return did
}

// takeOwn takes r in for the caller driving the engine (driveOwn), as
// enqueue and intake do, without the submission queue and its lock: the
// engine is idle and c.drive is held. (A Close that has begun cancels
// c.ctx, which driveOwn checks on every poll: r then completes with
// ErrNotConnected, as a request in flight at Close does.) It returns the
// clock reading r was born at.
func (c *Client) takeOwn(r *Request) time.Duration {
	now := c.begin(r)
	c.eng.takeIn(r, now) // idle: the wait for an answer starts now
	return now
}

// leave releases c.drive after a caller drove the engine, and wakes the
// engine goroutine when work is left.
func (c *Client) leave() {
	more := c.eng.busy()
	c.drive.Unlock()
	if more {
		c.wakeEngine()
	}
}

// sleepFor is sleep for a caller driving the engine: it also wakes when
// the caller's ctx is done.
func (c *Client) sleepFor(ctx context.Context, now time.Duration) {
	if ctx.Done() == nil {
		c.sleep(now)
		return
	}
	stop := context.AfterFunc(ctx, c.kickNow)
	c.sleep(now)
	stop()
}

// sleep blocks in CQ.Wait until an answer may be ready, a request is
// submitted, or the next retransmission is due.
func (c *Client) sleep(now time.Duration) {
	e := &c.eng
	next := now + 2*time.Millisecond
	if d, ok := e.tr.NextDeadline(); ok && d < next {
		next = d
	}
	kctx := *c.sub.kickCtx.Load()
	c.sub.waiting.Store(true)
	if !c.queued() {
		c.sub.timer.Reset(max(next-now, 0))
		e.tr.CQ().Wait(kctx)
		c.sub.timer.Stop()
	}
	c.sub.waiting.Store(false)
	if kctx.Err() != nil && c.ctx.Err() == nil {
		c.newKick()
	}
}

// submitClock is the clock reading a request submitted now is born at
// (engine.begin): while the engine goroutine polls (steps, or spins
// between them), the reading its latest step began with, which the
// step's callbacks and the callers it woke submit shortly after, saving
// each of them a clock read (a pipelined caller's one read per call,
// issue 31); else (the engine idles, sleeps or reconnects) the clock. A
// birth is never later than the Submit: a request's latency and round
// trip are measured from no later than its Submit, and from no earlier
// than the start of the engine's latest poll.
func (c *Client) submitClock() time.Duration {
	if t := c.sub.clock.Load(); t > 0 {
		return time.Duration(t)
	}
	return c.now()
}

// queued reports whether requests wait to be taken in.
func (c *Client) queued() bool {
	c.sub.mu.Lock()
	q := c.sub.queue != nil
	c.sub.mu.Unlock()
	return q
}

// intake moves submitted requests to the backlog, oldest first.
func (c *Client) intake(now time.Duration) bool {
	e := &c.eng
	if !c.sub.has.Load() {
		return false
	}
	c.sub.mu.Lock()
	q := c.sub.queue
	c.sub.queue = nil
	c.sub.has.Store(false)
	c.sub.mu.Unlock()
	if q == nil {
		return false
	}
	var rev *Request
	for q != nil {
		n := q.next
		q.next = rev
		rev = q
		q = n
	}
	for r := rev; r != nil; {
		n := r.next
		e.takeIn(r, now)
		r = n
	}
	return true
}

// reconnect re-runs Connect after answers stopped: the server may have
// restarted, switched modes, or lost the leadership of its HA group (or
// died, or been paused). Requests in flight go back to the queue and are
// resent under fresh tags (or sequence numbers) on the new data path,
// which may be another instance's; a failed reconnect is retried, and
// requests fail only at their deadlines. Every answer still passes
// accept, so no value at or below one returned before is handed out.
//
// Every Connect names the session it replaces (ConnectRequest.replaces):
// a server that still holds it releases it in the same call, so a
// reconnect never finds its own QPs taken by its old session, nor by a
// session whose grant it did not hear (a Connect that timed out here but
// was admitted there).
func (c *Client) reconnect(now time.Duration, force bool) {
	e := &c.eng
	e.reconnAt = now
	c.sub.adminLost.Store(false) // a loss from here on is probed again
	ctx, cancel := context.WithTimeout(c.ctx, reconnectBudget)
	defer cancel()
	// Only a server that restarted or switched (new epoch), stopped
	// leading, or let our lease lapse (lease.lost) has lost our session;
	// a live one is merely slow or losing packets, and retransmission
	// copes.
	unreachable := false
	if !force && e.groupChecks > 0 && e.slowAns == e.lastAns {
		// Between slow probes of an HA group's leader: ask the group
		// only (a paused leader's successor may be serving by now).
		e.groupChecks--
		if !c.admin.leaderMoved(ctx) {
			e.reconnAt = c.now() + groupCheckEvery - reconnectAfter
			return
		}
		c.log.Info("the group names another leader: reconnecting", "admin", c.Endpoint())
		unreachable, force = true, true
	}
	if !force {
		e.groupChecks = 0
		sctx, scancel := context.WithTimeout(ctx, dialAttempt)
		st, err := c.admin.adm.Status(sctx, &adminpb.StatusRequest{})
		scancel()
		unreachable = err != nil
		if err == nil && st.GetEpoch() == c.sess.epoch && st.GetRole() != adminclient.RoleStandby && !c.lease.lost.Load() {
			e.slowProbes = 0
			e.probedAlive(c.now())
			if now-e.lastAns > quietLog && c.log.Enabled(ctx, slog.LevelDebug) {
				next, _ := e.tr.NextDeadline()
				c.log.Debug("no answer yet; the server holds our session", "admin", c.Endpoint(), "session", c.sess.id,
					"quiet", now-e.lastAns, "inflight", e.inflight(), "queued", e.backlog != nil,
					"free", e.tr.Free(), "outstanding", e.tr.Outstanding(), "next_deadline", next-now,
					"retransmits", c.st.retransmits.Load(), "stale", c.st.stale.Load(), "late", c.st.late.Load(),
					"forged", c.st.forged.Load(), "answers", c.st.answers.Load(), "rtt", e.rtt,
					"next_probe_in", e.probeGap)
			}
			return
		}
		if err != nil && c.keepOnSlowProbe(ctx, err) {
			e.reconnAt = c.now() // the next probe a reconnectAfter from now
			return
		}
		c.log.Info("server lost our session; reconnecting", "admin", c.Endpoint(), "status_err", err)
	}
	// One server: nothing else to try, so give a slow one time to admit
	// us. Several: a paused one must not cost more than dialAttempt at
	// first; the attempts grow as reconnects fail (a leader busy with a
	// storm of reconnects).
	perTry := reconnectBudget
	if len(c.admin.addrs) > 1 {
		perTry = min(dialAttempt<<min(e.connFails, 3), reconnectBudget)
	}
	if err := c.admin.connectAny(ctx, perTry, unreachable, c.connect); err != nil {
		c.log.Debug("reconnect failed; retrying", "err", err)
		e.connectFailed(c.now(), rand.Float64(), isRedirect(err))
		return
	}
	e.reconnected(c.now())
	c.log.Info("reconnected", "admin", c.Endpoint(), "session", c.sess.id, "epoch", c.sess.epoch)
}

// keepOnSlowProbe reports whether a Status probe that failed with err
// leaves the session in place: a probe that timed out found a server
// that may be alive but slow (busy admitting others, say), which need not
// have lost our session, and a reconnect would only add to its load: the
// requests are retransmitted meanwhile. After slowProbesBeforeReconnect
// such probes in a row with no answer between them (a paused server, a
// leader to leave, a restarted one still reconnecting our admin
// connection) the client reconnects; naming its session in the Connect
// makes that safe even when the session was alive. Sooner when another
// instance of its HA group names another leader (leaderMoved): a paused
// leader's successor is then serving, and waiting out the probes would
// only add them to the failover.
func (c *Client) keepOnSlowProbe(ctx context.Context, err error) bool {
	e := &c.eng
	if status.Code(err) != codes.DeadlineExceeded || c.lease.lost.Load() {
		return false // refused, reset, or the lease renewer knows it is gone
	}
	if e.slowAns != e.lastAns {
		e.slowAns, e.slowProbes = e.lastAns, 0
	}
	e.slowProbes++
	keep := e.slowProbes < slowProbesBeforeReconnect
	if keep && len(c.admin.addrs) > 1 {
		if c.admin.leaderMoved(ctx) {
			c.log.Info("status probe timed out and the group names another leader: reconnecting", "admin", c.Endpoint())
			return false
		}
		e.groupChecks = groupChecksBetweenProbes
	}
	if keep {
		c.log.Debug("status probe timed out: keeping the session", "admin", c.Endpoint(), "probes", e.slowProbes)
	}
	return keep
}

// failAll fails every queued and outstanding request with err, and,
// once the client closed (ErrNotConnected), those submitted meanwhile.
func (c *Client) failAll(err error) {
	now := c.now()
	c.eng.failAll(now, err)
	if err == ErrNotConnected {
		c.intake(now)
		c.eng.failAll(now, err)
	}
}
