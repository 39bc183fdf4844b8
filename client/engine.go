package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

const (
	// A caller or the engine busy-polls for answers before it blocks in
	// the CQ's Wait: spinLong while recent round trips are short (below
	// shortRTT: a close, idle server, where blocking would cost more than
	// the answer's wait, and an answer delayed by a descheduled thread
	// would make the caller block), spinShort otherwise (a loaded machine
	// or a far server, where spinning only burns the CPU other clients
	// need).
	spinLong  = 200 * time.Microsecond
	spinShort = 30 * time.Microsecond
	shortRTT  = 50 * time.Microsecond
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
	// groupChecksBetweenProbes: after a probe of an HA group's leader
	// timed out and the group still named it, the client asks the group
	// again this many times, groupCheckEvery apart, before it probes the
	// leader again: a paused leader is deposed within about a second,
	// and a probe takes dialAttempt to time out. Each check dials one
	// standby.
	groupChecksBetweenProbes = 3
	groupCheckEvery          = 150 * time.Millisecond
	// reconnectBudget bounds one reconnect round of the engine (it sends
	// nothing meanwhile); a failed round is retried.
	reconnectBudget = 3 * time.Second
	// scanEvery paces the engine's look for requests in flight whose
	// callers gave up or whose deadline passed.
	scanEvery = 200 * time.Microsecond
)

// engine is the data path's state: the one transport of the mode the
// client is connected in, the requests in flight on it (by the
// transport's request ID) and the backlog of requests not sent yet. Only
// the engine goroutine (and Dial before it starts) touches it.
type engine struct {
	tr            transport
	flush         flusher       // tr, when it defers its posts to the end of a step
	rtt           time.Duration // moving average of submit-to-answer times (nextRTT)
	reqs          []*Request    // by request ID; nil: the ID is free
	free          []int         // the free IDs, a stack
	ids           []int         // Send's argument
	res           []result      // Poll's
	backlog, tail *Request
	timer         *time.Timer
	lastAns       time.Duration
	nextScan      time.Duration
	// due is when a lone caller's wait must next run a full step even if
	// nothing arrives (pollOwn): the next scan or retransmission.
	due      time.Duration
	reconnAt time.Duration
	// retryAfter is the pause before the next reconnect after failed
	// ones (nextBackoff: jittered, growing from retryConnectAfter up to
	// maxRetryConnect).
	retryAfter time.Duration
	connFailed bool
	connFails  int // reconnects failed in a row
	slowProbes int // Status probes timed out in a row (keepOnSlowProbe)
	// groupChecks: times left to ask the HA group who leads before the
	// next probe of a slow leader (keepOnSlowProbe).
	groupChecks int
	slowAns     time.Duration // lastAns when they began
	afterStep   func()        // tests: called at the end of every step
	// clock is the time the current step (or expiry) began: requests it
	// completes are timed by it (finish), one clock read per batch.
	clock time.Duration
}

func (e *engine) init() {
	e.ids, e.res = make([]int, 64), make([]result, 64)
}

// use makes tr the data path. No request is in flight (requeue).
func (e *engine) use(tr transport) {
	e.tr = tr
	e.flush, _ = tr.(flusher)
	n := tr.Free() + tr.Outstanding()
	if n > cap(e.reqs) {
		e.reqs, e.free = make([]*Request, n), make([]int, 0, n)
	}
	e.reqs = e.reqs[:n]
	e.free = e.free[:0]
	for id := n - 1; id >= 0; id-- {
		e.free = append(e.free, id)
	}
}

// flusher is a transport that queues what it would post during the
// engine's step (receives to post again, requests) and posts it all at
// the step's end, in as few provider calls as it can: with one poll of a
// shared CQ, two crossings into the provider per batch (issue 16).
type flusher interface{ Flush() }

func (e *engine) inflight() int { return len(e.reqs) - len(e.free) }

// take removes the request with ID id from the ones in flight.
func (e *engine) take(id int) *Request {
	r := e.reqs[id]
	if r != nil {
		e.reqs[id] = nil
		e.free = append(e.free, id)
	}
	return r
}

func (e *engine) pushBack(r *Request) {
	r.next = nil
	if e.tail == nil {
		e.backlog, e.tail = r, r
	} else {
		e.tail.next, e.tail = r, r
	}
}

func (e *engine) pushFront(r *Request) {
	r.next = e.backlog
	e.backlog = r
	if e.tail == nil {
		e.tail = r
	}
}

func (e *engine) popFront() *Request {
	r := e.backlog
	if r != nil {
		e.backlog = r.next
		if e.backlog == nil {
			e.tail = nil
		}
		r.next = nil
	}
	return r
}

// run starts the engine goroutine. The engine's timer and clock exist
// before: a lone caller may drive the engine as soon as run returns.
func (c *Client) run() {
	e := &c.eng
	e.timer = time.AfterFunc(time.Hour, c.kickNow)
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
	defer e.timer.Stop()
	sp := newSpin(false)
	defer sp.stop()
	for c.ctx.Err() == nil {
		now := c.now()
		did := c.intake(now)
		if e.connFailed {
			c.expireBacklog(now)
		} else {
			did = c.step(now) || did
		}
		waiting := e.inflight() > 0 || e.backlog != nil
		switch {
		case c.sub.adminLost.Load() && !e.connFailed && !e.tr.Broken():
			c.reconnect(now, false) // the admin connection was closed: probe
		case e.connFailed || e.tr.Broken():
			if now-e.reconnAt > max(e.retryAfter, retryConnectAfter) {
				c.reconnect(now, true)
			}
		case waiting && now-e.lastAns > reconnectAfter && now-e.reconnAt > reconnectAfter:
			c.reconnect(now, false)
		}
		if did {
			sp.stop()
			continue
		}
		if e.inflight() == 0 && e.backlog == nil {
			sp.stop()
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
		if sp.at(now) < e.spinFor() {
			sp.pause()
			continue
		}
		sp.stop()
		c.sleep(now)
	}
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
	if e.connFailed || e.tr == nil || e.tr.Broken() || e.inflight() != 0 || e.backlog != nil || c.ctx.Err() != nil {
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
	did := c.dispatch(now) // nothing is in flight: send before the first poll
	c.setDue()
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
	did := c.stepWith(now, n)
	c.setDue()
	return did
}

// setDue sets e.due after a full step.
func (c *Client) setDue() {
	e := &c.eng
	e.due = e.nextScan
	if d, ok := e.tr.NextDeadline(); ok && d < e.due {
		e.due = d
	}
}

// takeOwn takes r in for the caller driving the engine (driveOwn), as
// enqueue and intake do, without the submission queue and its lock: the
// engine is idle and c.drive is held. (A Close that has begun cancels
// c.ctx, which driveOwn checks on every poll: r then completes with
// ErrNotConnected, as a request in flight at Close does.) It returns the
// clock reading r was born at.
func (c *Client) takeOwn(r *Request) time.Duration {
	e := &c.eng
	now := c.begin(r)
	e.lastAns = now // the wait for an answer starts now
	c.setDeadline(r, now)
	e.pushBack(r)
	return now
}

// nextRTT folds a submit-to-answer time into the moving average avg
// (weight 1/8), each sample clamped to twice the average: one answer
// delayed by a descheduled thread (hundreds of microseconds on a busy
// machine) must not make the next calls spin short and block, which
// costs each of them a wake-up or two, while a lasting change (a loaded
// machine, a far server) still moves the average, by up to 1/8 a sample.
func nextRTT(avg, sample time.Duration) time.Duration {
	if avg > 0 && sample > 2*avg {
		sample = 2 * avg
	}
	return avg + (sample-avg)/8
}

// spinFor is how long to busy-poll before blocking (spinLong, spinShort).
func (e *engine) spinFor() time.Duration { return spinFor(e.rtt) }

func spinFor(rtt time.Duration) time.Duration {
	if rtt < shortRTT {
		return spinLong
	}
	return spinShort
}

// leave releases c.drive after a caller drove the engine, and wakes the
// engine goroutine when work is left.
func (c *Client) leave() {
	e := &c.eng
	more := e.inflight() > 0 || e.backlog != nil
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

// step is one round on the transport: take answers, retransmit, give up
// on requests whose callers did, send the backlog.
func (c *Client) step(now time.Duration) bool {
	e := &c.eng
	return c.stepWith(now, e.tr.Poll(now, e.res))
}

// stepWith is step once the poll returned n answers into e.res.
func (c *Client) stepWith(now time.Duration, n int) bool {
	e := &c.eng
	e.clock = now
	tr := e.tr
	did := false
	for _, x := range e.res[:n] {
		r := e.take(x.ID)
		if r == nil {
			continue
		}
		did = true
		if x.Err != nil {
			c.st.retransmits.Add(1)
			e.pushFront(r) // sent again, after reconnecting if the QP broke
			continue
		}
		e.lastAns = now
		e.rtt = nextRTT(e.rtt, now-r.born)
		c.accept(r, x.Value)
		if r.ownDone && n == 1 {
			// A lone caller's answer, alone in the poll: it returns now,
			// and the expiry and dispatch it skips run on the next step
			// (its own next call's, or the engine goroutine's, which
			// leave wakes when work is left).
			return true
		}
	}
	if k := tr.Expire(now); k > 0 {
		c.st.retransmits.Add(uint64(k))
	}
	return c.dispatch(now) || did
}

// dispatch is the second half of a step: give up on requests whose
// callers did or whose deadline passed, send the backlog, and post what
// the step queued.
func (c *Client) dispatch(now time.Duration) bool {
	e := &c.eng
	e.clock = now
	tr := e.tr
	did := false
	if now >= e.nextScan {
		e.nextScan = now + scanEvery
		for id, r := range e.reqs {
			if r != nil && (r.abandoned.Load() || now >= r.deadline) {
				tr.Cancel(id)
				e.take(id)
				c.timeout(r)
			}
		}
	}
	for e.backlog != nil && (e.backlog.abandoned.Load() || now >= e.backlog.deadline) {
		c.timeout(e.popFront())
	}
	for e.backlog != nil && !tr.Broken() {
		if e.backlog.n > 1 { // a range: one request of its own (reserve.go)
			if !c.sendRange(now) {
				break
			}
			did = true
			continue
		}
		k := min(tr.Free(), len(e.ids), len(e.free))
		j := 0
		for r := e.backlog; r != nil && j < k && r.n <= 1; r = r.next {
			e.ids[j] = e.free[len(e.free)-1-j]
			j++
		}
		if j == 0 {
			break
		}
		sent, err := tr.Send(now, e.ids[:j])
		for _, id := range e.ids[:sent] {
			e.reqs[id] = e.popFront()
		}
		e.free = e.free[:len(e.free)-sent]
		if sent > 0 {
			did = true
		}
		if err != nil || sent < j {
			break
		}
	}
	if e.flush != nil {
		e.flush.Flush()
	}
	if e.afterStep != nil {
		e.afterStep()
	}
	return did
}

// accept hands out v for r, unless it would go backwards: the one check,
// whatever the mode, that no value at or below one already returned
// before r was submitted is handed out.
func (c *Client) accept(r *Request, v uint64) {
	if v <= r.floor {
		c.st.regressions.Add(1)
		c.log.Error("server answered a value not above one already returned", "value", v, "floor", r.floor, "mode", c.Mode())
		c.finish(r, 0, fmt.Errorf("%w: %d <= %d", ErrRegression, v, r.floor))
		return
	}
	last := v + r.span() // a range's last value (reserve.go)
	for {
		m := c.maxRet.Load()
		if last <= m || c.maxRet.CompareAndSwap(m, last) {
			break
		}
	}
	c.st.answers.Add(1)
	c.finish(r, Timestamp(v), nil)
}

// timeout fails r: its deadline passed or its caller gave up.
func (c *Client) timeout(r *Request) {
	c.st.timeouts.Add(1)
	c.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
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
		e.timer.Reset(max(next-now, 0))
		e.tr.CQ().Wait(kctx)
		e.timer.Stop()
	}
	c.sub.waiting.Store(false)
	if kctx.Err() != nil && c.ctx.Err() == nil {
		c.newKick()
	}
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
	if e.backlog == nil && e.inflight() == 0 {
		e.lastAns = now // the wait for an answer starts now
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
		c.setDeadline(r, now)
		e.pushBack(r)
		r = n
	}
	return true
}

// setDeadline sets r's deadline on the client's clock: its caller's, or
// the default timeout from now, when the engine takes it in.
func (c *Client) setDeadline(r *Request, now time.Duration) {
	r.deadline = now + c.opts.timeout
	if !r.Deadline.IsZero() {
		r.deadline = r.Deadline.Sub(c.start)
	}
}

// requeue takes every request in flight back to the front of the
// backlog (leaving the data path, or reconnecting on it): they are sent
// again, under fresh tags or sequence numbers, on the next one. Answers
// that still come for them are dropped.
func (c *Client) requeue(now time.Duration) {
	e := &c.eng
	for id := len(e.reqs) - 1; id >= 0; id-- {
		if r := e.take(id); r != nil {
			e.tr.Cancel(id)
			e.pushFront(r)
		}
	}
}

// finish completes r.
func (c *Client) finish(r *Request, ts Timestamp, err error) {
	r.TS, r.Err = ts, err
	c.st.completed.Add(1)
	if err != nil {
		c.st.failed.Add(1)
	}
	if c.st.latency != nil {
		c.st.latency.Observe(uint64(max(c.eng.clock-r.born, 0)))
	}
	if r.own {
		r.ownDone = true // its caller, driving the engine, returns it (driveOwn)
		return
	}
	if r.abandoned.Load() {
		if r.pooled {
			r.abandoned.Store(false)
			c.pool.Put(r)
		}
		return
	}
	if r.Callback != nil {
		r.Callback(r)
		return
	}
	r.Done <- r
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
		c.requeue(c.now()) // a transport that broke: its requests wait for the next
		e.connFailed = true
		e.connFails++
		e.retryAfter = nextBackoff(e.retryAfter, retryConnectAfter, maxRetryConnect, rand.Float64())
		c.expireBacklog(c.now())
		return
	}
	e.connFailed, e.retryAfter, e.connFails, e.slowProbes, e.groupChecks = false, 0, 0, 0, 0
	c.st.reconnects.Add(1)
	e.lastAns = c.now()
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

// failAll fails every queued and outstanding request with err.
func (c *Client) failAll(err error) {
	e := &c.eng
	now := c.now()
	e.clock = now
	for id := range e.reqs {
		if r := e.take(id); r != nil {
			e.tr.Cancel(id)
			c.finish(r, 0, err)
		}
	}
	for r := e.popFront(); r != nil; r = e.popFront() {
		c.finish(r, 0, err)
	}
	if err == ErrNotConnected {
		c.intake(now)
		for r := e.popFront(); r != nil; r = e.popFront() {
			c.finish(r, 0, err)
		}
	}
}

// expireBacklog fails queued requests whose deadline passed or whose
// caller gave up.
func (c *Client) expireBacklog(now time.Duration) {
	e := &c.eng
	e.clock = now
	var keep, tail *Request
	for r := e.popFront(); r != nil; r = e.popFront() {
		if r.abandoned.Load() || now >= r.deadline {
			c.timeout(r)
			continue
		}
		if tail == nil {
			keep = r
		} else {
			tail.next = r
		}
		tail = r
	}
	e.backlog, e.tail = keep, tail
}
