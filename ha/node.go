package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seqd/seqd/internal/zapslog"
)

// Node is one seqd instance's membership in the HA group: it campaigns,
// runs a serving function for each term it wins, and tracks the leader.
type Node struct {
	cfg Config
	// deferrals: depositions etcdPrompt put off (detect's goroutine only).
	deferrals int
	cli       *clientv3.Client
	// endClient cancels the client's own context (Client.Ctx): every
	// call made with it, and the resignation etcd's Campaign makes with
	// it when its context ends, returns. Run calls it a DialTimeout
	// after its context ends, so that a stop cannot wait for a dead etcd.
	endClient context.CancelFunc
	log       *slog.Logger
	m         *metrics
	base      time.Time
	// kvWrap, when set (tests only), wraps the KV each term's Store
	// writes the mark through: fault injection.
	kvWrap func(clientv3.KV) clientv3.KV
	// beatKV, when set (tests only), is the KV heartbeats are written
	// through: latency injection.
	beatKV clientv3.KV

	// consent: a missing mark may be taken as a fresh start (Config.Init
	// or Config.Advance). It ends, for good, the first time this node
	// sees the group's mark: a mark that vanishes later is a wiped or
	// damaged etcd, never a new group.
	consent atomic.Bool
	// witness is the highest mark this instance has seen, in
	// Config.DataDir; nil without one.
	witness *Witness

	leader   atomic.Pointer[string] // advertised address of the leader
	term     atomic.Pointer[Term]   // the current term, nil when standby
	running  atomic.Bool
	leaderCh chan struct{} // closed and replaced when leader changes (or LeaderSilent turns false)
	// beatAt is when the current leader's heartbeat last moved, as seen
	// here (nanoseconds since base); 0 when no heartbeat of its term is
	// known (LeaderSilent).
	beatAt atomic.Int64

	mu     sync.Mutex     // guards leaderCh and closed
	closed bool           // Close has begun: no new background work
	wg     sync.WaitGroup // background revocations
}

// New connects to etcd (lazily: it does not wait for etcd to answer).
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cctx, endClient := context.WithCancel(context.Background())
	cli, err := clientv3.New(clientv3.Config{
		Context:              cctx,
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    cfg.TTL,
		DialKeepAliveTimeout: cfg.DialTimeout,
		// etcd's client logs through zap: bridged into seqd's slog
		// logger, in its level and format.
		Logger: zapslog.Logger(cfg.Logger.With("component", "etcd")),
	})
	if err != nil {
		endClient()
		return nil, fmt.Errorf("ha: etcd client for %v: %w", cfg.Endpoints, err)
	}
	n := &Node{cfg: cfg, cli: cli, endClient: endClient, log: cfg.Logger.With("component", "ha", "name", cfg.Name), m: newMetrics(),
		base: time.Now(), leaderCh: make(chan struct{})}
	if cfg.DataDir != "" {
		w, err := OpenWitness(cfg.DataDir)
		if err != nil {
			cli.Close()
			return nil, err
		}
		n.witness = w
		if m, ok := w.Mark(); ok {
			n.log.Info("ha: witness opened", "file", w.Path(), "mark", m)
		} else {
			n.log.Info("ha: new witness: the first mark seen in etcd is trusted", "file", w.Path())
		}
	}
	empty := ""
	n.leader.Store(&empty)
	n.consent.Store(cfg.Init || cfg.Advance > 0)
	return n, nil
}

// markSeen ends the consent to a missing mark.
func (n *Node) markSeen() {
	if n.consent.Swap(false) {
		n.log.Info("ha: the group's mark exists: it is loaded, never overwritten; from now on a missing mark stops this instance",
			"key", n.cfg.markKey(), "init", n.cfg.Init, "advance", n.cfg.Advance)
	}
}

// followMark reads the mark key, then watches it from that revision, and
// hands each value it sees (the one read and every one written, by any
// instance) to seen, until seen returns false or ctx ends. One loop serves
// both consumers of the group's mark below.
func (n *Node) followMark(ctx context.Context, seen func(v []byte) (more bool)) {
	key := n.cfg.markKey()
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
		resp, err := n.cli.Get(gctx, key)
		cancel()
		if err != nil {
			pause()
			continue
		}
		if len(resp.Kvs) > 0 && !seen(resp.Kvs[0].Value) {
			return
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := n.cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if wr.Err() != nil {
				break // read again
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut && !seen(ev.Kv.Value) {
					wcancel()
					return
				}
			}
		}
		wcancel()
		pause()
	}
}

// watchMark follows the group's mark. Any mark ends the consent to a
// missing one, whoever wrote it: a standby started with -init that has
// never led must not take a later wiped etcd for a new group. With a
// witness, every mark also raises it: a standby that never led must
// remember how far the group has gone, so that a restored etcd snapshot
// is refused by it too. Without a witness it stops once consent has ended.
func (n *Node) watchMark(ctx context.Context) {
	if n.witness == nil && !n.consent.Load() {
		return
	}
	n.followMark(ctx, func(v []byte) bool {
		n.markSeen()
		if n.witness == nil {
			return false
		}
		n.witnessMark(v)
		return true
	})
}

// witnessMark raises the witness to the mark v (encoded as in etcd); a
// bad mark is left to Load, which reports it.
func (n *Node) witnessMark(v []byte) {
	if m, err := decodeMark(v); err == nil {
		if err := n.witness.Raise(m); err != nil {
			n.log.Warn("ha: recording the group's mark in the witness failed", "err", err)
		}
	}
}

// syncWitness raises the witness to the group's mark as etcd holds it
// now, on a stop: the watch can be a mark behind (one written a moment
// before), and an instance that stopped with it, its data directory then
// restarted on an etcd snapshot of that older mark, would take the
// snapshot's mark for the group's. Bounded: etcd gone, it gives up.
func (n *Node) syncWitness() {
	if n.witness == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(n.cfg.DialTimeout, time.Second))
	defer cancel()
	resp, err := n.cli.Get(ctx, n.cfg.markKey())
	if err != nil {
		n.log.Warn("ha: reading the group's mark for the witness on the way out failed: the witness keeps the last mark watched",
			"err", err, "key", n.cfg.markKey())
		return
	}
	if len(resp.Kvs) > 0 {
		n.witnessMark(resp.Kvs[0].Value)
	}
}

// Witness is the node's witness (nil without Config.DataDir).
func (n *Node) Witness() *Witness { return n.witness }

// Close closes the etcd client, which ends background revocations, and
// releases the witness. Call it after Run has returned.
func (n *Node) Close() error {
	err := n.cli.Close()
	n.endClient()
	if n.witness != nil {
		n.witness.Close()
	}
	// A revocation starting now would only fail on the closed client (its
	// lease expires in etcd instead); taking mu orders wg.Add before
	// wg.Wait.
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

// Client is the node's etcd client.
func (n *Node) Client() *clientv3.Client { return n.cli }

// Collectors are the node's Prometheus metrics.
func (n *Node) Collectors() []prometheus.Collector { return n.m.all }

// Config returns the validated configuration.
func (n *Node) Config() Config { return n.cfg }

// Leader returns the advertised admin address of the leader as last seen
// in etcd, or "" when none is known. It may be this node's own.
func (n *Node) Leader() string { return *n.leader.Load() }

// LeaderChanged returns a channel closed the next time Leader changes,
// the next time LeaderSilent turns false (the leader's heartbeat is
// seen again, or the view of the leader is read afresh), or when this
// instance's term serves again after its serving lease lapsed (a
// heartbeat answered late).
func (n *Node) LeaderChanged() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaderCh
}

// notify closes and replaces leaderCh: LeaderChanged's waiters look again.
func (n *Node) notify() {
	n.mu.Lock()
	close(n.leaderCh)
	n.leaderCh = make(chan struct{})
	n.mu.Unlock()
}

// LeaderSilent reports whether the leader this instance sees serves
// under a serving lease whose heartbeat has not moved here for more than
// two Beats: it is being deposed (killed, paused, cut off from etcd) or
// is slow. False on the leader, without fast failover, and while no
// heartbeat of the leader's term is known. It is a hint (haserve holds a
// client's Status while the group has no serving leader), never a
// fencing decision: those are detect's, conditioned in etcd.
func (n *Node) LeaderSilent() bool {
	at := n.beatAt.Load()
	if at == 0 || n.term.Load() != nil {
		return false
	}
	return time.Since(n.base)-time.Duration(at) > 2*n.cfg.Beat
}

// noteBeat records the leader's heartbeat as moved now (fresh: a
// heartbeat of its term seen or read) or unknown; waiters on
// LeaderChanged look again when it ends a silence.
func (n *Node) noteBeat(fresh bool) {
	silent := n.LeaderSilent()
	if fresh {
		n.beatAt.Store(max(int64(time.Since(n.base)), 1))
	} else {
		n.beatAt.Store(0)
	}
	if silent {
		n.notify()
	}
}

// Term returns the current term if this node leads and the term is valid,
// else nil.
func (n *Node) Term() *Term {
	if t := n.term.Load(); t != nil && t.Valid() {
		return t
	}
	return nil
}

// Run campaigns until ctx is done. Each time it wins it calls serve with
// the term and a context canceled when the term ends; serve must return
// soon after. A serve error ends the term (logged), and the node campaigns
// again, except ErrNoMark (the group has no mark and this node no consent
// to start without one) and ErrMarkBehind (etcd's mark is below this
// node's witness): Run returns that error (the instance stops, as a
// single seqd does without its mark file). Otherwise Run returns
// ctx's error.
func (n *Node) Run(ctx context.Context, serve func(ctx context.Context, t *Term) error) error {
	if n.running.Swap(true) {
		return errors.New("ha: Run called twice")
	}
	// A stop resigns and revokes the lease through etcd, so that a
	// standby takes over at once; with etcd unreachable those calls
	// would wait for it (Campaign's resignation has no deadline of its
	// own). A DialTimeout after ctx ends, the client's context ends
	// them.
	context.AfterFunc(ctx, func() { time.AfterFunc(n.cfg.DialTimeout, n.endClient) })
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.observe(ctx) }()
	go func() { defer wg.Done(); n.watchMark(ctx) }()
	if n.cfg.FastFailover() {
		wg.Add(1)
		go func() { defer wg.Done(); n.detect(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := n.session(ctx, serve)
		if refusal(err) {
			n.log.Error("ha: refusing to serve", "err", err)
			return err
		}
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			n.log.Warn("ha: campaign failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		backoff = 50 * time.Millisecond
	}
	n.syncWitness()
	return ctx.Err()
}

// session grants a lease, keeps it alive, campaigns on it and leads one
// term if it wins. It revokes the lease on the way out, so a standby takes
// over at once.
func (n *Node) session(ctx context.Context, serve func(ctx context.Context, t *Term) error) error {
	l, err := n.grant(ctx)
	if err != nil {
		return err
	}
	sctx, scancel := context.WithCancel(ctx)
	defer func() {
		scancel()
		n.revoke(clientv3.LeaseID(l.id))
	}()
	sess, err := concurrency.NewSession(n.cli, concurrency.WithLease(clientv3.LeaseID(l.id)), concurrency.WithContext(sctx))
	if err != nil {
		return fmt.Errorf("ha: session: %w", err)
	}
	go n.keepAlive(sctx, l)
	// The campaign ends when the lease does.
	go func() {
		select {
		case <-sctx.Done():
		case <-sess.Done():
			scancel()
		case <-l.gone:
			scancel()
		}
	}()
	e := concurrency.NewElection(sess, n.cfg.electionPrefix())
	if err := e.Campaign(sctx, n.cfg.Advertise); err != nil {
		return fmt.Errorf("ha: campaign: %w", err)
	}
	// Campaign does not notice its own key vanishing while it waits:
	// check that the key still stands, and the lease is still ours. With
	// the serving lease on, the first heartbeat checks the key (its
	// guard is the key's create revision): one etcd round trip less
	// before a new leader serves.
	if l.remaining() <= 0 {
		return fmt.Errorf("%w: the lease of election key %s ran out while campaigning", ErrNotLeader, e.Key())
	}
	if !n.cfg.FastFailover() {
		rctx, rcancel := context.WithTimeout(sctx, n.cfg.DialTimeout)
		resp, err := n.cli.Get(rctx, e.Key())
		rcancel()
		if err != nil {
			return fmt.Errorf("ha: check the won election key: %w", err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev() {
			return fmt.Errorf("%w: election key %s lost while campaigning", ErrNotLeader, e.Key())
		}
	}
	t := newTerm(n, e.Key(), e.Rev(), l)
	if t.serve != nil {
		// The serving lease opens with the first heartbeat: a standby
		// can depose this term only once it has seen one. A key lost
		// while campaigning fails its guard (errDeposed). The next ones
		// go out a beat after it, answered or not (beatLoop): started
		// only once it was answered, they left the gate closed for a
		// while at the start of every term on a slow etcd. The loop ends
		// with the term, which every way out of here ends.
		go n.beatLoop(sctx, t)
		if err := n.beat(sctx, t); err != nil {
			if errors.Is(err, errDeposed) {
				t.end(endDeposed)
			} else {
				t.end(endServe)
			}
			return fmt.Errorf("ha: first heartbeat of term %d: %w", t.Rev, err)
		}
	}
	n.term.Store(t)
	n.m.terms.Inc()
	n.m.leader.Set(1)
	n.log.Info("ha: leading", "key", t.Key, "rev", t.Rev, "deadline_in", l.remaining().Round(time.Millisecond))
	tctx, tcancel := context.WithCancel(sctx)
	go func() {
		n.watchTerm(tctx, t, sess)
		tcancel()
	}()
	err = serve(tctx, t)
	if err != nil && tctx.Err() == nil && !refusal(err) {
		n.log.Error("ha: serving the term failed", "err", err)
	}
	t.end(endServe) // no-op when the term had ended already
	tcancel()
	n.term.Store(nil)
	n.m.leader.Set(0)
	if refusal(err) {
		return err
	}
	return nil
}

// refusal reports whether err stops the instance: the group's state in
// etcd is missing (ErrNoMark) or behind what this instance has seen
// (ErrMarkBehind), and only the operator can say how to go on.
func refusal(err error) bool { return errors.Is(err, ErrNoMark) || errors.Is(err, ErrMarkBehind) }

// watchTerm ends t when its lease deadline passes, the lease is gone, a
// save finds the election key gone, etcd reports the key deleted, or ctx
// ends (transfer or stop).
func (n *Node) watchTerm(ctx context.Context, t *Term, sess *concurrency.Session) {
	timer := time.NewTimer(max(t.lease.remaining(), 0))
	defer timer.Stop()
	// The election key deleted behind the term's back (an operator, a
	// wiped etcd) lets a standby win at once: end the term as soon as
	// etcd says so, rather than at its next save. A watch that fails
	// leaves that to the save's guard.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := n.cli.Watch(wctx, t.Key, clientv3.WithRev(t.Rev+1))
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				wch = nil
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					t.end(endLost)
					return
				}
			}
			continue
		case <-timer.C:
			if r := t.lease.remaining(); r > 0 {
				timer.Reset(r)
				continue
			}
			t.end(endDeadline)
		case <-t.lease.gone:
			t.end(endLeaseGone)
		case <-sess.Done():
			t.end(endLeaseGone)
		case <-t.lost:
			t.end(endLost)
		case <-t.done:
		case <-ctx.Done():
			t.end(endStop)
		}
		return
	}
}

// grant grants a lease; its deadline counts from before the request.
func (n *Node) grant(ctx context.Context) (*lease, error) {
	l := &lease{base: n.base, gone: make(chan struct{})}
	sent := time.Since(n.base)
	gctx, cancel := context.WithTimeout(ctx, min(n.cfg.DialTimeout, time.Second))
	resp, err := n.cli.Grant(gctx, int64(n.cfg.TTL/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ha: grant lease: %w", err)
	}
	l.id = int64(resp.ID)
	l.extend(sent + time.Duration(resp.TTL)*time.Second - n.cfg.Margin)
	return l, nil
}

// keepAlive renews l every KeepAliveEvery and moves its deadline to the
// send time of each answered renewal plus the granted TTL minus Margin.
// It marks l gone when etcd says the lease no longer exists.
func (n *Node) keepAlive(ctx context.Context, l *lease) {
	tick := time.NewTicker(n.cfg.KeepAliveEvery)
	defer tick.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Since(n.base)
		kctx, cancel := context.WithTimeout(ctx, n.cfg.TTL/2)
		resp, err := n.cli.KeepAliveOnce(kctx, clientv3.LeaseID(l.id))
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL <= 0):
			n.log.Warn("ha: lease gone", "lease", fmt.Sprintf("%x", l.id))
			l.markGone()
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			fails++
			if fails == 1 || fails%10 == 0 {
				n.log.Warn("ha: lease keep-alive failed", "err", err, "fails", fails, "deadline_in", l.remaining().Round(time.Millisecond))
			}
		default:
			fails = 0
			l.extend(sent + time.Duration(resp.TTL)*time.Second - n.cfg.Margin)
		}
	}
}

// revoke revokes a lease we are done with, deleting our election key so a
// standby wins at once. When etcd does not answer it keeps trying in the
// background, with short attempts, for as long as the lease could live
// (etcd extends leases when its own leader changes): after an outage the
// stale key goes as soon as etcd is back, instead of a TTL later.
func (n *Node) revoke(id clientv3.LeaseID) {
	if n.tryRevoke(id) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		giveUp := time.Now().Add(3*n.cfg.TTL + 10*time.Second)
		for time.Now().Before(giveUp) {
			select {
			case <-n.cli.Ctx().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if n.tryRevoke(id) {
				return
			}
		}
	}()
}

func (n *Node) tryRevoke(id clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(n.cli.Ctx(), min(n.cfg.DialTimeout, 500*time.Millisecond))
	defer cancel()
	_, err := n.cli.Revoke(ctx, id)
	return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// observe tracks the leader's advertised address: the value of the
// election key with the lowest create revision.
func (n *Node) observe(ctx context.Context) {
	pfx := n.cfg.electionPrefix() + "/"
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
		resp, err := n.cli.Get(gctx, pfx, clientv3.WithFirstCreate()...)
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		leader := ""
		if len(resp.Kvs) > 0 {
			leader = string(resp.Kvs[0].Value)
		}
		n.setLeader(leader)
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := n.cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		changed := false
		for !changed {
			select {
			case <-ctx.Done():
				changed = true
			case wr, ok := <-wch:
				// Any event, error or close: read the leader again.
				_ = wr
				_ = ok
				changed = true
			}
		}
		wcancel()
	}
}

func (n *Node) setLeader(addr string) {
	if *n.leader.Load() == addr {
		return
	}
	n.leader.Store(&addr)
	n.notify()
	n.log.Info("ha: leader", "addr", addr, "self", addr == n.cfg.Advertise)
}

// Transfer ends this node's term so that a standby takes over, and waits
// until etcd names another leader. It fails with ErrNotLeader on a standby
// and ErrNoStandby when no other instance is campaigning.
func (n *Node) Transfer(ctx context.Context) (newLeader string, err error) {
	t := n.Term()
	if t == nil {
		return "", fmt.Errorf("%w: leader is %q", ErrNotLeader, n.Leader())
	}
	resp, err := n.cli.Get(ctx, n.cfg.electionPrefix()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return "", fmt.Errorf("ha: transfer: count candidates: %w", err)
	}
	if resp.Count < 2 {
		return "", ErrNoStandby
	}
	ch := n.LeaderChanged()
	t.end(endTransfer)
	for {
		if l := n.Leader(); l != "" && l != n.cfg.Advertise {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("ha: transfer: waiting for a new leader: %w", ctx.Err())
		case <-ch:
			ch = n.LeaderChanged()
		}
	}
}
