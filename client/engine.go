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
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// engine owns the queue pairs; it is the only goroutine that touches them.
func (c *Client) engine() {
	defer close(c.doneCh)
	c.timer = time.AfterFunc(time.Hour, c.kickNow)
	defer c.timer.Stop()
	c.lastAns = c.now()
	idleSince := time.Duration(-1)
	for c.ctx.Err() == nil {
		now := c.now()
		did := c.intake(now)
		if c.connFailed {
			c.expireBacklog(now)
		} else if c.alt != nil {
			did = c.altStep(now) || did
		} else {
			did = c.poll(now) || did
			c.expire(now)
			did = c.post(now) || did
			c.reapSends()
		}
		waiting := c.outstanding() > 0 || c.backlog != nil
		switch {
		case c.connFailed || (c.alt != nil && c.alt.Broken()):
			if now-c.reconnAt > max(c.retryAfter, retryConnectAfter) {
				c.reconnect(now, true)
			}
		case waiting && now-c.lastAns > reconnectAfter && now-c.reconnAt > reconnectAfter:
			c.reconnect(now, false)
		}
		if did {
			idleSince = -1
			continue
		}
		if c.outstanding() == 0 && c.backlog == nil {
			select {
			case <-c.wakeCh:
			case <-c.ctx.Done():
			}
			idleSince = -1
			continue
		}
		if idleSince < 0 {
			idleSince = now
		}
		if now-idleSince < spinFor {
			runtime.Gosched()
			continue
		}
		c.sleep(now)
		idleSince = -1
	}
	c.failAll(ErrNotConnected)
}

// sleep blocks in CQ.Wait until an answer may be ready, a request is
// submitted, or the next retransmission is due.
func (c *Client) sleep(now time.Duration) {
	next := now + 2*time.Millisecond
	cq := c.recvCQ
	if c.alt != nil {
		cq = c.alt.CQ()
		if d, ok := c.alt.NextDeadline(); ok && d < next {
			next = d
		}
	}
	for _, q := range c.qps {
		if d, ok := q.win.NextDeadline(); ok && d < next {
			next = d
		}
	}
	kctx := *c.kickCtx.Load()
	c.waiting.Store(true)
	c.mu.Lock()
	queued := c.queue != nil
	c.mu.Unlock()
	if !queued {
		c.timer.Reset(max(next-now, 0))
		cq.Wait(kctx)
		c.timer.Stop()
	}
	c.waiting.Store(false)
	if kctx.Err() != nil && c.ctx.Err() == nil {
		c.newKick()
	}
}

func (c *Client) kickNow() {
	c.kickMu.Lock()
	if c.kick != nil {
		c.kick()
	}
	c.kickMu.Unlock()
}

func (c *Client) outstanding() int {
	n := 0
	for _, q := range c.qps {
		n += q.win.Outstanding()
	}
	if c.alt != nil {
		n += c.alt.Outstanding()
	}
	return n
}

// intake moves submitted requests to the backlog, oldest first.
func (c *Client) intake(now time.Duration) bool {
	c.mu.Lock()
	q := c.queue
	c.queue = nil
	c.mu.Unlock()
	if q == nil {
		return false
	}
	if c.backlog == nil && c.outstanding() == 0 {
		c.lastAns = now // the wait for an answer starts now
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
		r.deadline = r.Deadline.Sub(c.start)
		if r.Deadline.IsZero() {
			r.deadline = now + c.opts.timeout
		}
		c.pushBack(r)
		r = n
	}
	return true
}

func (c *Client) pushBack(r *Request) {
	r.next = nil
	if c.tail == nil {
		c.backlog, c.tail = r, r
	} else {
		c.tail.next, c.tail = r, r
	}
}

func (c *Client) pushFront(r *Request) {
	r.next = c.backlog
	c.backlog = r
	if c.tail == nil {
		c.tail = r
	}
}

func (c *Client) popFront() *Request {
	r := c.backlog
	if r != nil {
		c.backlog = r.next
		if c.backlog == nil {
			c.tail = nil
		}
		r.next = nil
	}
	return r
}

// post sends backlog requests on QPs with room, one chain per QP.
func (c *Client) post(now time.Duration) bool {
	if c.backlog == nil {
		return false
	}
	did := false
	// One doorbell for all QPs' chains where the device can (the
	// userspace provider: one sendmmsg instead of one per QP).
	if b, ok := c.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	for qi, q := range c.qps {
		n := 0
		for c.backlog != nil && q.win.Outstanding() < q.granted && n < len(q.wrs) {
			r := c.backlog
			if r.abandoned.Load() || now >= r.deadline {
				c.popFront()
				c.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
				continue
			}
			if q.posted-q.done+uint64(n)+1 >= uint64(cap(q.wrs)+2*signalEvery) {
				break
			}
			tag, _, err := q.win.Send(now, 0)
			if err != nil {
				break
			}
			c.popFront()
			guess, high := c.spec.Guess(now)
			r.high, r.qp = high, qi
			if guess == spec.NoGuess {
				r.high = ^uint64(0)
			}
			q.inflight[tag] = r
			seq := q.posted + uint64(n)
			wr := &q.wrs[n]
			*wr = verbs.SendWR{ID: seq<<8 | uint64(qi), Opcode: verbs.OpSendWithImm,
				Imm: uint32(spec.MustRequestImm(tag, guess)), AH: c.ahs[q.server],
				RemoteQPN: c.srvQPN[q.server], RemoteQKey: c.qkey}
			if seq%signalEvery == signalEvery-1 {
				wr.Flags = verbs.Signaled
			}
			n++
		}
		if n == 0 {
			continue
		}
		posted, err := q.qp.PostSend(q.wrs[:n])
		q.posted += uint64(posted)
		c.st.doorbells.Add(1)
		did = true
		if err != nil {
			c.log.Warn("post requests", "qp", qi, "posted", posted, "of", n, "err", err)
			// the unposted ones stay in their window and are resent on expiry
		}
	}
	return did
}

// reapSends frees send queue slots.
func (c *Client) reapSends() {
	n, err := c.sendCQ.Poll(c.swcs)
	if err != nil {
		return
	}
	for _, wc := range c.swcs[:n] {
		qi := int(wc.ID & 0xff)
		if qi < len(c.qps) {
			if seq := wc.ID >> 8; seq+1 > c.qps[qi].done {
				c.qps[qi].done = seq + 1
			}
		}
	}
}

// poll handles answers.
func (c *Client) poll(now time.Duration) bool {
	n, err := c.recvCQ.Poll(c.wcs)
	if err != nil || n == 0 {
		return false
	}
	buf := c.recvMR.Bytes()
	for qi, q := range c.qps {
		nr := 0
		for i := range c.wcs[:n] {
			wc := &c.wcs[i]
			if int(wc.ID>>32) != qi {
				continue
			}
			slot := wc.ID & 0xffffffff
			c.recvWRs[nr].ID = wc.ID
			c.recvSGE[nr] = verbs.SGE{Addr: c.recvMR.Addr() + slot*recvSlot, Length: recvSlot, LKey: c.recvMR.LKey()}
			nr++
			if wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCWithImm == 0 || wc.ByteLen < verbs.GRHLen {
				c.st.malformed.Add(1)
				continue
			}
			if !c.srvResp.Match(wc) {
				c.st.forged.Add(1) // not from the server's response QPs
				continue
			}
			off := slot*recvSlot + verbs.GRHLen
			c.answer(now, q, spec.Imm(wc.Imm), buf[off:off+uint64(wc.ByteLen)-verbs.GRHLen])
		}
		if nr > 0 {
			if _, err := q.qp.PostRecv(c.recvWRs[:nr]); err != nil {
				c.log.Warn("re-post receives", "qp", qi, "err", err)
			}
		}
	}
	return true
}

func (c *Client) answer(now time.Duration, q *cqp, imm spec.Imm, payload []byte) {
	tag := imm.Tag()
	if _, _, ok := q.win.Answer(now, tag); !ok {
		c.st.stale.Add(1)
		return
	}
	r := q.inflight[tag]
	q.inflight[tag] = nil
	c.lastAns = now
	high := r.high
	if high == ^uint64(0) {
		high = 0
		if len(payload) != spec.FullLen {
			c.st.malformed.Add(1) // a confirmation of no guess
			c.pushFront(r)
			return
		}
	}
	v, full, err := spec.DecodeAnswer(imm, payload, high)
	if err != nil {
		c.st.malformed.Add(1)
		c.pushFront(r)
		return
	}
	if full {
		c.st.specMisses.Add(1)
	}
	c.spec.Learn(now, v)
	if v <= r.floor {
		c.st.regressions.Add(1)
		c.log.Error("server answered a value not above one already returned", "value", v, "floor", r.floor)
		c.finish(r, 0, fmt.Errorf("%w: %d <= %d", ErrRegression, v, r.floor))
		return
	}
	for {
		m := c.maxRet.Load()
		if v <= m || c.maxRet.CompareAndSwap(m, v) {
			break
		}
	}
	c.st.answers.Add(1)
	c.finish(r, Timestamp(v), nil)
}

// expire resends or fails requests that waited too long for an answer.
func (c *Client) expire(now time.Duration) {
	for _, q := range c.qps {
		c.expired = q.win.Expire(now, c.expired[:0])
		for i := len(c.expired) - 1; i >= 0; i-- { // pushFront: keep send order
			e := c.expired[i]
			r := q.inflight[e.Tag]
			q.inflight[e.Tag] = nil
			if r == nil {
				continue
			}
			if r.abandoned.Load() || now >= r.deadline {
				c.st.timeouts.Add(1)
				c.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
				continue
			}
			c.st.retransmits.Add(1)
			c.pushFront(r)
		}
	}
}

// finish completes r.
func (c *Client) finish(r *Request, ts Timestamp, err error) {
	r.TS, r.Err = ts, err
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
// requests fail only at their deadlines. Every answer still passes the
// floor check, so no value at or below one returned before is handed out.
//
// Every Connect names the session it replaces (ConnectRequest.replaces):
// a server that still holds it releases it in the same call, so a
// reconnect never finds its own QPs taken by its old session, nor by a
// session whose grant it did not hear (a Connect that timed out here but
// was admitted there).
func (c *Client) reconnect(now time.Duration, force bool) {
	c.reconnAt = now
	ctx, cancel := context.WithTimeout(c.ctx, reconnectBudget)
	defer cancel()
	// Only a server that restarted or switched (new epoch), stopped
	// leading, or let our lease lapse (sessionLost) has lost our session;
	// a live one is merely slow or losing packets, and retransmission
	// copes.
	unreachable := false
	if !force {
		sctx, scancel := context.WithTimeout(ctx, dialAttempt)
		st, err := c.adm.Status(sctx, &adminpb.StatusRequest{})
		scancel()
		unreachable = err != nil
		if err == nil && st.GetEpoch() == c.epoch && st.GetRole() != adminclient.RoleStandby && !c.sessionLost.Load() {
			c.slowProbes = 0
			return
		}
		if err != nil && c.keepOnSlowProbe(err) {
			c.reconnAt = c.now() // the next probe a reconnectAfter from now
			return
		}
		c.log.Info("server lost our session; reconnecting", "admin", c.Endpoint(), "status_err", err)
	}
	c.requeueS0(c.now()) // resent under fresh tags once connected
	// One server: nothing else to try, so give a slow one time to admit
	// us. Several: a paused one must not cost more than dialAttempt at
	// first; the attempts grow as reconnects fail (a leader busy with a
	// storm of reconnects).
	perTry := reconnectBudget
	if len(c.addrs) > 1 {
		perTry = min(dialAttempt<<min(c.connFails, 3), reconnectBudget)
	}
	if err := c.connectAny(ctx, perTry, unreachable); err != nil {
		c.log.Debug("reconnect failed; retrying", "err", err)
		c.connFailed = true
		c.connFails++
		c.retryAfter = nextBackoff(c.retryAfter, retryConnectAfter, maxRetryConnect, rand.Float64())
		c.closeAlt()
		c.expireBacklog(c.now())
		return
	}
	c.connFailed, c.retryAfter, c.connFails, c.slowProbes = false, 0, 0, 0
	c.st.reconnects.Add(1)
	c.lastAns = c.now()
	c.log.Info("reconnected", "admin", c.Endpoint(), "session", c.session, "epoch", c.epoch)
}

// keepOnSlowProbe reports whether a Status probe that failed with err
// leaves the session in place: a probe that timed out found a server
// that may be alive but slow (busy admitting others, say), which need not
// have lost our session, and a reconnect would only add to its load: the
// requests are retransmitted meanwhile. After slowProbesBeforeReconnect
// such probes in a row with no answer between them (a paused server, a
// leader to leave, a restarted one still reconnecting our admin
// connection) the client reconnects; naming its session in the Connect
// makes that safe even when the session was alive.
func (c *Client) keepOnSlowProbe(err error) bool {
	if status.Code(err) != codes.DeadlineExceeded || c.sessionLost.Load() {
		return false // refused, reset, or the lease renewer knows it is gone
	}
	if c.slowAns != c.lastAns {
		c.slowAns, c.slowProbes = c.lastAns, 0
	}
	c.slowProbes++
	keep := c.slowProbes < slowProbesBeforeReconnect
	if keep {
		c.log.Debug("status probe timed out: keeping the session", "admin", c.Endpoint(), "probes", c.slowProbes)
	}
	return keep
}

// failAll fails every queued and outstanding request with err.
func (c *Client) failAll(err error) {
	now := c.now()
	for _, q := range c.qps {
		for t, r := range q.inflight {
			if r != nil {
				q.win.Cancel(now, spec.Tag(t))
				q.inflight[t] = nil
				c.finish(r, 0, err)
			}
		}
	}
	for r := c.popFront(); r != nil; r = c.popFront() {
		c.finish(r, 0, err)
	}
	if err == ErrNotConnected {
		c.intake(now)
		for r := c.popFront(); r != nil; r = c.popFront() {
			c.finish(r, 0, err)
		}
	}
}

// expireBacklog fails queued requests whose deadline passed or whose
// caller gave up.
func (c *Client) expireBacklog(now time.Duration) {
	var keep, tail *Request
	for r := c.popFront(); r != nil; r = c.popFront() {
		if r.abandoned.Load() || now >= r.deadline {
			c.st.timeouts.Add(1)
			c.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
			continue
		}
		if tail == nil {
			keep = r
		} else {
			tail.next = r
		}
		tail = r
	}
	c.backlog, c.tail = keep, tail
}
