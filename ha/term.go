package ha

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
)

// lease tracks one etcd lease and its local deadline: the latest instant
// at which this process may still assume it holds the lease.
type lease struct {
	id       int64
	base     time.Time    // monotonic origin of deadline
	deadline atomic.Int64 // nanoseconds since base; only grows
	gone     chan struct{}
	goneOnce sync.Once
}

// extend moves the deadline to at, never backward.
func (l *lease) extend(at time.Duration) {
	for {
		d := l.deadline.Load()
		if int64(at) <= d || l.deadline.CompareAndSwap(d, int64(at)) {
			return
		}
	}
}

// remaining is the time left before the deadline (<= 0: passed).
func (l *lease) remaining() time.Duration {
	return time.Duration(l.deadline.Load()) - time.Since(l.base)
}

func (l *lease) markGone() { l.goneOnce.Do(func() { close(l.gone) }) }

// Term is one leadership term of this instance. It is valid from the win
// until it ends; it never becomes valid again.
type Term struct {
	// Key and Rev identify the term: the election key and its create
	// revision in etcd.
	Key string
	Rev int64

	n     *Node
	lease *lease
	// serve is the serving lease renewed by heartbeats (Config.Beat);
	// nil when that is off.
	serve    *lease
	store    *Store
	ended    atomic.Bool
	lost     chan struct{} // closed by markLost: a save or heartbeat found the key gone
	lostOnce sync.Once

	once   sync.Once
	done   chan struct{}
	reason atomic.Pointer[string]
	begun  time.Time
}

func newTerm(n *Node, key string, rev int64, l *lease) *Term {
	t := &Term{Key: key, Rev: rev, n: n, lease: l, lost: make(chan struct{}), done: make(chan struct{}), begun: time.Now()}
	if n.cfg.FastFailover() {
		// Closed until the first heartbeat is answered.
		t.serve = &lease{base: l.base, gone: make(chan struct{})}
	}
	kv := n.cli.KV
	if n.kvWrap != nil {
		kv = n.kvWrap(kv)
	}
	t.store = NewStore(kv, n.cfg.markKey(), key, rev, t.markLost)
	t.store.m = n.m
	t.store.fresh = n.consent.Load
	t.store.seen = n.markSeen
	t.store.endpoints = n.cfg.Endpoints
	t.store.prefix = n.cfg.Prefix
	t.store.witness = n.witness
	t.store.advance = n.cfg.Advance
	t.store.warn = n.log.Warn
	return t
}

// markLost tells watchTerm that the election key is gone.
func (t *Term) markLost() { t.lostOnce.Do(func() { close(t.lost) }) }

// Gate returns nil while the term is valid: it has not ended, its etcd
// lease's local deadline has not passed, and neither has its serving
// lease's (when Config.Beat is on). It is the oracle's Config.Gate; it
// does not allocate.
func (t *Term) Gate() error {
	if !t.Valid() {
		t.n.m.gateDenied.Inc()
		return ErrNotLeader
	}
	return nil
}

// Valid reports whether Gate would let a claim through now.
func (t *Term) Valid() bool {
	now := int64(time.Since(t.lease.base)) // one clock read: both leases count from base
	return !t.ended.Load() && t.lease.deadline.Load() > now && (t.serve == nil || t.serve.deadline.Load() > now)
}

// Deadline is the instant the term stops serving unless its leases are
// renewed first: the earlier of the etcd lease's and the serving lease's
// local deadlines.
func (t *Term) Deadline() time.Time {
	d := t.lease.deadline.Load()
	if t.serve != nil {
		d = min(d, t.serve.deadline.Load())
	}
	return t.lease.base.Add(time.Duration(d))
}

// Store is the term's mark store.
func (t *Term) Store() *Store { return t.store }

// Done is closed when the term has ended.
func (t *Term) Done() <-chan struct{} { return t.done }

// Reason says why the term ended ("" while it lasts).
func (t *Term) Reason() string {
	if r := t.reason.Load(); r != nil {
		return *r
	}
	return ""
}

// end closes the gate first, then announces the end. Later calls do
// nothing.
func (t *Term) end(reason string) {
	t.once.Do(func() {
		t.ended.Store(true) // fence BEFORE anything else learns of the end
		t.reason.Store(&reason)
		close(t.done)
		t.n.m.termEnds.WithLabelValues(reason).Inc()
		t.n.log.Warn("ha: leadership term ended", "reason", reason, "key", t.Key, "rev", t.Rev,
			"lasted", time.Since(t.begun).Round(time.Millisecond))
	})
}

// OpenOracle opens an oracle for the term: cfg's Store and Gate are the
// term's. Open loads the mark, starts above it (and above the Node's
// Config.Advance) and persists its first window before it returns, so
// nothing is served before that. A missing mark fails with ErrNoMark
// unless the Node consents to a fresh start (Config.Init, Config.Advance).
func (t *Term) OpenOracle(ctx context.Context, cfg oracle.Config) (*oracle.Oracle, error) {
	cfg.Store = t.store
	cfg.Gate = t.Gate
	cfg.Dir = ""
	cfg.Init = false // the Store decides about a missing mark
	cfg.Floor = max(cfg.Floor, t.n.cfg.Advance)
	if cfg.Format == 0 || cfg.Format == spec.FormatHybrid {
		// A hybrid term starts at or above now<<18: a clock past the
		// witness floors it above every value served (Store.Load).
		clock := cfg.Clock
		if clock == nil {
			clock = func() int64 { return time.Now().UnixMilli() }
		}
		t.store.mu.Lock()
		t.store.clockFloor = func() uint64 { return spec.HybridFloor(clock()) }
		t.store.mu.Unlock()
	}
	o, err := oracle.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ha: term %d: %w", t.Rev, err)
	}
	return o, nil
}
