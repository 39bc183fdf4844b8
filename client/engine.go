package client

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
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
	// With deepPipeline requests or more in flight, the engine goroutine
	// spins spinDeep at most before it blocks: answers come in bursts
	// (the server answers a batch, then waits for the next), a wake-up is
	// paid once per burst, and polling through the gap between bursts
	// cost the pipelined client about 8 empty receive syscalls per burst
	// (issue 31: 0.37 receive syscalls per call spinning, 0.09 with
	// spinDeep, 0.04 blocking at once; the client's CPU per call 15 %
	// lower with spinDeep, in interleaved runs).
	deepPipeline = 32
	spinDeep     = 5 * time.Microsecond
	// reconnectAfter: with requests outstanding and no answer for this
	// long, the client assumes the server restarted and re-runs Connect.
	// It first asks for the server's epoch: only a new epoch (a restart
	// or a mode switch) makes it reconnect.
	reconnectAfter = 50 * time.Millisecond
	// quietLog: a probe that finds the session alive after this long
	// with no answer logs the data path's state (debug level).
	quietLog = time.Second
	// maxProbeGap caps the spacing of Status probes that keep finding
	// the session alive with no answer coming (engine.probedAlive).
	maxProbeGap = 500 * time.Millisecond
	// retryConnectAfter paces reconnects after a failed one, or after an
	// atomics QP broke.
	retryConnectAfter = 5 * time.Millisecond
	// maxRetryConnect caps the backoff between failed reconnects (while
	// an HA group elects a new leader, say). A thousand clients retrying
	// every 100 ms sent 10,000 Status and Connect calls a second to the
	// instances electing a leader; at 1 s (jittered) they send ~1,000.
	maxRetryConnect = time.Second
	// maxRetryElecting caps it instead when the last reconnect was
	// turned away by an instance of an HA group that answered (a
	// standby's redirect, a leader-elect not serving yet): the group is
	// electing, not overloaded, and such an answer was held while it
	// elects (haserve's awaitServing), which paces the retries already.
	// At a one-second cap, the clients that failed during an election
	// slept up to a second past the new leader's first value (HA storm:
	// 840 of 1,000 reconnected 1-2 s after it served).
	maxRetryElecting = 100 * time.Millisecond
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

// engine is the data path's state machine: the one transport of the
// mode the client is connected in, the requests in flight on it (by the
// transport's request ID) and the backlog of requests not sent yet.
//
// It is driven as etcd raft's RawNode is: its inputs are method calls
// with the time passed in (takeIn a request, step after a poll, expire
// the backlog, requeue and use a new transport on a reconnect or a mode
// switch), and its outputs are the transport calls it makes (Send,
// Cancel, Flush) and the requests it completes (finish: Done, Callback,
// or the lone caller's ownDone). It starts no goroutine, reads no clock
// and does no admin I/O: the Client is its shell (loop.go), which owns
// the sockets, the threads, the clock and the admin plane. Only whoever
// holds Client.drive (or Dial before the engine runs) touches it.
type engine struct {
	tr            transport
	flush         flusher       // tr, when it defers its posts to the end of a step
	rtt           time.Duration // moving average of submit-to-answer times (nextRTT)
	reqs          []*Request    // by request ID; nil: the ID is free
	free          []int         // the free IDs, a stack
	ids           []int         // Send's argument
	res           []result      // Poll's
	backlog, tail *Request
	lastAns       time.Duration
	nextScan      time.Duration
	// due is when a lone caller's wait must next run a full step even if
	// nothing arrives (pollOwn): the next scan or retransmission.
	due      time.Duration
	reconnAt time.Duration
	// probeGap is the wait between Status probes while each finds the
	// session alive and no answer comes (probedAlive); 0 until then.
	probeGap time.Duration
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
	// mode is the mode of tr (for errors and logs).
	mode string

	engineEnv
}

// engineEnv is what the engine shares with its Client: the counters it
// reports into, the largest value returned (accept), where abandoned
// pooled requests go back, and the deadline's default and origin.
type engineEnv struct {
	st         *stats
	maxRet     *atomic.Uint64
	pool       *sync.Pool
	log        *slog.Logger
	defTimeout time.Duration // WithTimeout: a request's deadline without its own
	start      time.Time     // the engine clock's zero (Request.Deadline is on the wall clock)
}

func (e *engine) init(env engineEnv) {
	e.engineEnv = env
	e.ids, e.res = make([]int, 64), make([]result, 64)
}

// use makes tr, a transport of mode, the data path. No request is in
// flight (requeue).
func (e *engine) use(tr transport, mode string) {
	e.tr, e.mode = tr, mode
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

// busy reports whether requests are in flight or queued.
func (e *engine) busy() bool { return e.inflight() > 0 || e.backlog != nil }

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

// begin starts r at now: no result yet, the floor its value must exceed
// (every value returned before the call), and its birth. The request
// counts from here. It touches only r and atomics: callers run it on
// their own goroutines (Submit), before the engine takes r in.
func (e *engine) begin(r *Request, now time.Duration) {
	r.TS, r.Err = 0, nil
	r.floor = e.maxRet.Load()
	r.born = now
	e.st.requests.Add(1)
}

// takeIn queues r, begun, at the back of the backlog, with its deadline.
// An idle engine's wait for an answer starts now.
func (e *engine) takeIn(r *Request, now time.Duration) {
	if !e.busy() {
		e.lastAns, e.probeGap = now, 0 // the wait for an answer starts now
	}
	e.setDeadline(r, now)
	e.pushBack(r)
}

// setDeadline sets r's deadline on the engine's clock: its caller's, or
// the default timeout from now, when the engine takes it in.
func (e *engine) setDeadline(r *Request, now time.Duration) {
	r.deadline = now + e.defTimeout
	if !r.Deadline.IsZero() {
		r.deadline = r.Deadline.Sub(e.start)
	}
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

// loopSpinFor is how long the engine goroutine busy-polls before
// blocking: spinFor, or spinDeep at most while a deep pipeline is in
// flight.
func (e *engine) loopSpinFor() time.Duration { return loopSpinFor(e.rtt, e.inflight()) }

func loopSpinFor(rtt time.Duration, inflight int) time.Duration {
	if inflight >= deepPipeline {
		return min(spinDeep, spinFor(rtt))
	}
	return spinFor(rtt)
}

func spinFor(rtt time.Duration) time.Duration {
	if rtt < shortRTT {
		return spinLong
	}
	return spinShort
}

// setDue sets e.due after a full step.
func (e *engine) setDue() {
	e.due = e.nextScan
	if d, ok := e.tr.NextDeadline(); ok && d < e.due {
		e.due = d
	}
}

// step is one round on the transport: take answers, retransmit, give up
// on requests whose callers did, send the backlog.
func (e *engine) step(now time.Duration) bool {
	return e.stepWith(now, e.tr.Poll(now, e.res))
}

// stepWith is step once the poll returned n answers into e.res.
func (e *engine) stepWith(now time.Duration, n int) bool {
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
			e.st.retransmits.Add(1)
			e.pushFront(r) // sent again, after reconnecting if the QP broke
			continue
		}
		e.lastAns, e.probeGap = now, 0
		e.rtt = nextRTT(e.rtt, now-r.born)
		e.accept(r, x.Value)
		if r.ownDone && n == 1 {
			// A lone caller's answer, alone in the poll: it returns now,
			// and the expiry and dispatch it skips run on the next step
			// (its own next call's, or the engine goroutine's, which
			// leave wakes when work is left).
			return true
		}
	}
	if k := tr.Expire(now); k > 0 {
		e.st.retransmits.Add(uint64(k))
	}
	return e.dispatch(now) || did
}

// dispatch is the second half of a step: give up on requests whose
// callers did or whose deadline passed, send the backlog, and post what
// the step queued.
func (e *engine) dispatch(now time.Duration) bool {
	e.clock = now
	tr := e.tr
	did := false
	if now >= e.nextScan {
		e.nextScan = now + scanEvery
		for id, r := range e.reqs {
			if r != nil && (r.abandoned.Load() || now >= r.deadline) {
				tr.Cancel(id)
				e.take(id)
				e.timeout(r)
			}
		}
	}
	for e.backlog != nil && (e.backlog.abandoned.Load() || now >= e.backlog.deadline) {
		e.timeout(e.popFront())
	}
	for e.backlog != nil && !tr.Broken() {
		if e.backlog.n > 1 { // a range: one request of its own (reserve.go)
			if !e.sendRange(now) {
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
func (e *engine) accept(r *Request, v uint64) {
	if v <= r.floor {
		e.st.regressions.Add(1)
		e.log.Error("server answered a value not above one already returned", "value", v, "floor", r.floor, "mode", e.mode)
		e.finish(r, 0, fmt.Errorf("%w: %d <= %d", ErrRegression, v, r.floor))
		return
	}
	last := v + r.span() // a range's last value (reserve.go)
	for {
		m := e.maxRet.Load()
		if last <= m || e.maxRet.CompareAndSwap(m, last) {
			break
		}
	}
	e.st.answers.Add(1)
	e.finish(r, Timestamp(v), nil)
}

// timeout fails r: its deadline passed or its caller gave up.
func (e *engine) timeout(r *Request) {
	e.st.timeouts.Add(1)
	e.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
}

// finish completes r.
func (e *engine) finish(r *Request, ts Timestamp, err error) {
	r.TS, r.Err = ts, err
	e.st.completed.Add(1)
	if err != nil {
		e.st.failed.Add(1)
	}
	if e.st.latency != nil {
		e.st.latency.Observe(uint64(max(e.clock-r.born, 0)))
	}
	if r.own {
		r.ownDone = true // its caller, driving the engine, returns it (driveOwn)
		return
	}
	if r.abandoned.Load() {
		if r.pooled {
			r.abandoned.Store(false)
			e.pool.Put(r)
		}
		return
	}
	if r.Callback != nil {
		r.Callback(r)
		return
	}
	r.Done <- r
}

// requeue takes every request in flight back to the front of the
// backlog (leaving the data path, or reconnecting on it): they are sent
// again, under fresh tags or sequence numbers, on the next one. Answers
// that still come for them are dropped.
func (e *engine) requeue() {
	for id := len(e.reqs) - 1; id >= 0; id-- {
		if r := e.take(id); r != nil {
			e.tr.Cancel(id)
			e.pushFront(r)
		}
	}
}

// reconnectDue decides, after a step at now, whether the shell must
// reconnect: a probe (force false) at once when the admin connection
// that admitted the session was lost (adminLost: its server was killed
// or restarted), even with nothing in flight; force when the last
// reconnect failed or the transport broke (once the backoff passed); a
// probe when requests wait and no answer came for reconnectAfter.
func (e *engine) reconnectDue(now time.Duration, adminLost bool) (due, force bool) {
	switch {
	case adminLost && !e.connFailed && !e.tr.Broken():
		return true, false
	case e.connFailed || e.tr.Broken():
		return now-e.reconnAt > max(e.retryAfter, retryConnectAfter), true
	case e.busy() && now-e.lastAns > reconnectAfter && now-e.reconnAt > max(e.probeGap, reconnectAfter):
		return true, false
	}
	return false, false
}

// probedAlive records a Status probe that ended at now and found the
// session alive, though no answer came: the server is slow or losing
// packets, and retransmission copes. The probe runs on the engine's
// goroutine, which neither retransmits nor polls meanwhile, so the next
// one waits from its end, and twice as long each time (up to
// maxProbeGap) until an answer comes: a server busy admitting a storm of
// clients answers Status slowly, and probes back to back left the data
// path one retransmission per probe (seen in the HA storm: 30 in 7 s,
// no answer).
func (e *engine) probedAlive(now time.Duration) {
	e.reconnAt = now
	e.probeGap = min(max(2*e.probeGap, reconnectAfter), maxProbeGap)
}

// connectFailed records a failed reconnect at now: the requests of a
// transport that broke wait for the next one, the pause before the next
// try grows (u: a uniform random number in [0, 1), nextBackoff), and
// queued requests whose deadline passed fail.
func (e *engine) connectFailed(now time.Duration, u float64, electing bool) {
	e.requeue()
	e.connFailed = true
	e.connFails++
	limit := maxRetryConnect
	if electing {
		limit = maxRetryElecting
	}
	e.retryAfter = nextBackoff(e.retryAfter, retryConnectAfter, limit, u)
	e.expireBacklog(now)
}

// reconnected records a reconnect that succeeded at now.
func (e *engine) reconnected(now time.Duration) {
	e.connFailed, e.retryAfter, e.connFails, e.slowProbes, e.groupChecks, e.probeGap = false, 0, 0, 0, 0, 0
	e.st.reconnects.Add(1)
	e.lastAns = now
}

// failAll fails every queued and outstanding request with err.
func (e *engine) failAll(now time.Duration, err error) {
	e.clock = now
	for id := range e.reqs {
		if r := e.take(id); r != nil {
			e.tr.Cancel(id)
			e.finish(r, 0, err)
		}
	}
	for r := e.popFront(); r != nil; r = e.popFront() {
		e.finish(r, 0, err)
	}
}

// expireBacklog fails queued requests whose deadline passed or whose
// caller gave up.
func (e *engine) expireBacklog(now time.Duration) {
	e.clock = now
	var keep, tail *Request
	for r := e.popFront(); r != nil; r = e.popFront() {
		if r.abandoned.Load() || now >= r.deadline {
			e.timeout(r)
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
