package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Admission control of the admin plane under a connect storm (after a
// restart or an HA failover every client reconnects at once).
//
// Go's scheduler has no priorities: a goroutine the network poller wakes
// (the etcd client's, with the answer to the leadership lease's
// keep-alive) queues behind every runnable one. With a thousand TLS
// handshakes and Connects runnable at once, on a loaded machine, that
// queue took seconds, the lease's keep-alives timed out and the
// leadership flapped. So the admin plane bounds how many of each run at
// once: handshakes beyond MaxHandshakes wait, parked, for a slot (at
// most HandshakeWait, then the connection is closed), and Connects
// beyond MaxConnects wait, parked, for a slot (at most queueWait, and
// only a few per slot); the rest are refused with Unavailable and a
// retry-after (a google.rpc.RetryInfo detail), which the client library
// honours with jitter. Parked goroutines cost the scheduler nothing: the
// election's goroutines find a short run queue.

// Defaults filled by Config.validate.
const (
	// DefaultMaxConnects is how many Connects the admin plane handles at
	// once; more wait briefly or are refused with a retry-after.
	DefaultMaxConnects = 32
	// DefaultMaxHandshakes is how many TLS handshakes the admin plane
	// computes at once (one waiting for its client holds no slot); more
	// wait.
	DefaultMaxHandshakes = 4
	// DefaultHandshakeWait bounds a handshake's wait for a slot.
	DefaultHandshakeWait = time.Second
)

// Bounds of the retry-after a refused Connect carries.
const (
	minRetryAfter = 20 * time.Millisecond
	maxRetryAfter = time.Second
)

// ErrHandshakeBusy closes a connection whose TLS handshake waited
// HandshakeWait for a slot.
var ErrHandshakeBusy = errors.New("admin: too many TLS handshakes at once; connection closed, retry")

// admission bounds the Connects handled at once: one beyond the bound
// waits, parked, for a slot, at most queueWait and only while fewer than
// maxWaiting wait; otherwise it is refused with a retry-after.
type admission struct {
	slots   chan struct{} // nil: no bound
	waiting atomic.Int32
	// svc is a moving average of a Connect's handling time, nanoseconds.
	svc atomic.Int64
}

// queueWait bounds a Connect's wait for a slot: well below the client
// library's first attempt (500 ms), so that a refusal, with its
// retry-after, reaches the client before it gives up on the call.
const queueWait = 250 * time.Millisecond

// waitingPerSlot: at most this many Connects wait per slot; more are
// refused at once.
const waitingPerSlot = 8

func newAdmission(limit int) *admission {
	a := &admission{}
	if limit > 0 {
		a.slots = make(chan struct{}, limit)
	}
	return a
}

// acquire takes a Connect slot, waiting for one at most queueWait. When
// it gets none it returns false and the pause the caller should wait
// before trying again; when ctx ends first, false and zero.
func (a *admission) acquire(ctx context.Context) (ok bool, retryAfter time.Duration) {
	if a.slots == nil {
		return true, 0
	}
	select {
	case a.slots <- struct{}{}:
		return true, 0
	default:
	}
	limit := cap(a.slots)
	n := int(a.waiting.Add(1))
	defer a.waiting.Add(-1)
	if n > limit*waitingPerSlot {
		return false, retryAfterFor(time.Duration(a.svc.Load()), n, limit)
	}
	t := time.NewTimer(waitFor(ctx))
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return true, 0
	case <-ctx.Done():
		return false, 0
	case <-t.C:
		return false, retryAfterFor(time.Duration(a.svc.Load()), int(a.waiting.Load()), limit)
	}
}

// waitFor is how long a Connect may wait for a slot: queueWait, and at
// most half the time left to its caller's deadline, so that the refusal
// and its retry-after reach the caller in time; a caller retries a busy
// instance (the HA storm: Connects held while the group elected the new
// leader, then queued, ran out of the client's 500 ms before the
// refusal came, and the client went on to other instances).
func waitFor(ctx context.Context) time.Duration {
	d := queueWait
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	return max(d, 0)
}

// release gives back a slot held for took.
func (a *admission) release(took time.Duration) {
	if a.slots == nil {
		return
	}
	<-a.slots
	for {
		old := a.svc.Load()
		next := int64(took)
		if old != 0 {
			next = old + (int64(took)-old)/8
		}
		if a.svc.CompareAndSwap(old, next) {
			return
		}
	}
}

// retryAfterFor is the retry-after of a Connect refused when limit
// Connects, each taking about svc, are in hand and waiting more wait for
// a slot: the time the instance needs to work through those until half
// of the waiting room (waitingPerSlot per slot) is free again, bounded by
// [minRetryAfter, maxRetryAfter]. The refused come back (with up to 50%
// jitter) while the rest still drain and wait their turn there: asked to
// come back once all had drained, a storm's refused clients came back in
// waves, and the instance idled between them. Pure.
func retryAfterFor(svc time.Duration, waiting, limit int) time.Duration {
	if limit < 1 {
		limit = 1
	}
	ahead := max(waiting+limit-limit*waitingPerSlot/2, limit)
	d := time.Duration(int64(svc) * int64(ahead) / int64(limit))
	return min(max(d, minRetryAfter), maxRetryAfter)
}

// overloaded is the Unavailable status of a Connect refused by admission
// control: its message and a RetryInfo detail carry the pause.
func overloaded(limit int, after time.Duration) error {
	st := status.New(codes.Unavailable, fmt.Sprintf(
		"admin: %d Connects in hand, the most this instance handles at once (seqd -admin-max-connects %d); retry after %v",
		limit, limit, after))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		st = d
	}
	return st.Err()
}

// limitedCreds bounds the server-side TLS handshakes computing at once.
// A handshake holds a slot only while it computes: its connection gives
// the slot back whenever the handshake reads from the client, and takes
// one again (waiting, parked, at most wait) when the read returns. A
// slot held across the round trip to a busy client would idle while
// others queue. A handshake that waits longer than wait for a slot fails
// (ErrHandshakeBusy) and its connection is closed.
type limitedCreds struct {
	credentials.TransportCredentials
	slots chan struct{}
	wait  time.Duration
	shed  func() // counts a handshake given up
}

func limitHandshakes(c credentials.TransportCredentials, limit int, wait time.Duration, shed func()) credentials.TransportCredentials {
	if c == nil || limit <= 0 {
		return c
	}
	return &limitedCreds{TransportCredentials: c, slots: make(chan struct{}, limit), wait: wait, shed: shed}
}

func (l *limitedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	sc := &slotConn{Conn: conn, l: l}
	out, info, err := l.TransportCredentials.ServerHandshake(sc)
	sc.release()
	if sc.busy {
		l.shed()
		if err == nil {
			out.Close()
		}
		return nil, nil, ErrHandshakeBusy
	}
	if err != nil {
		return nil, nil, err
	}
	if out == sc {
		out = conn // a wrapper that passes the conn through
	}
	return out, info, nil
}

func (l *limitedCreds) Clone() credentials.TransportCredentials {
	return &limitedCreds{TransportCredentials: l.TransportCredentials.Clone(), slots: l.slots, wait: l.wait, shed: l.shed}
}

// acquire takes a slot, waiting at most l.wait.
func (l *limitedCreds) acquire() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// slotConn is a connection during its TLS handshake: it holds one of
// limitedCreds' slots while the handshake computes, none while it reads.
// After the handshake the TLS connection reads from it without slots:
// the handshake's last release leaves none held.
type slotConn struct {
	net.Conn
	l      *limitedCreds
	held   bool
	done   bool // the handshake returned: reads pass through
	busy   bool // no slot came within the wait
	readMu sync.Mutex
}

func (c *slotConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.done {
		return c.Conn.Read(p)
	}
	if c.held {
		<-c.l.slots
		c.held = false
	}
	n, err := c.Conn.Read(p)
	if err != nil {
		return n, err
	}
	if !c.l.acquire() {
		c.busy = true
		return 0, ErrHandshakeBusy
	}
	c.held = true
	return n, nil
}

// release gives back the slot held, if any, once the handshake returned.
func (c *slotConn) release() {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.held {
		<-c.l.slots
		c.held = false
	}
	c.done = true
}

// admitConnect takes a Connect slot or returns the refusal; the caller
// calls done when the Connect is handled.
func (s *Server) admitConnect(ctx context.Context) (done func(), err error) {
	ok, after := s.admission.acquire(ctx)
	if !ok {
		if after == 0 {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, s.quotas.refuse(s.cfg.Metrics, ReasonBusy, overloaded(cap(s.admission.slots), after))
	}
	start := time.Now()
	return func() { s.admission.release(time.Since(start)) }, nil
}
