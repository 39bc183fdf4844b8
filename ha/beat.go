package ha

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The serving lease (Config.Beat, Config.ServeLease): see doc.go, "Fast
// failover", for the argument. The leader renews it by writing the
// heartbeat key under its term's guard; standbys watch that key and
// depose a leader whose heartbeat has stood still for TakeoverAfter, in a
// transaction conditioned on the heartbeat they saw.

// beatValue names the term that wrote a heartbeat: "<rev> <key>".
func beatValue(key string, rev int64) string { return strconv.FormatInt(rev, 10) + " " + key }

// parseBeat is beatValue's inverse; ok is false for anything else.
func parseBeat(v []byte) (key string, rev int64, ok bool) {
	r, k, found := strings.Cut(string(v), " ")
	if !found || k == "" {
		return "", 0, false
	}
	rev, err := strconv.ParseInt(r, 10, 64)
	if err != nil || rev <= 0 {
		return "", 0, false
	}
	return k, rev, true
}

// errDeposed: a heartbeat's guard failed, the term's election key is gone.
var errDeposed = errors.New("ha: heartbeat refused: the term's election key is gone")

// beat renews t's serving lease once. The local clock is read BEFORE the
// request is sent, so the deadline it sets (that reading + ServeLease)
// is earlier than any a standby could derive from seeing the write.
func (n *Node) beat(ctx context.Context, t *Term) error {
	sent := time.Since(t.serve.base)
	bctx, cancel := context.WithTimeout(ctx, n.cfg.ServeLease)
	kv := n.beatKV
	if kv == nil {
		kv = n.cli.KV
	}
	resp, err := kv.Txn(bctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.Key), "=", t.Rev)).
		Then(clientv3.OpPut(n.cfg.beatKey(), beatValue(t.Key, t.Rev))).
		Commit()
	cancel()
	if err != nil {
		n.m.beatErrors.Inc()
		return err
	}
	if !resp.Succeeded {
		return errDeposed
	}
	lapsed := t.serve.remaining() <= 0
	t.serve.extend(sent + n.cfg.ServeLease)
	if lapsed && t.serve.remaining() > 0 {
		n.notify() // the term serves again: LeaderChanged's waiters look again
	}
	return nil
}

// beatLoop renews t's serving lease every Beat until ctx ends or the
// term is deposed (which ends it). Heartbeats are sent every Beat
// whether or not the last one was answered, up to ServeLease/Beat in
// flight: a heartbeat answered d after it was sent keeps the gate open
// while d < ServeLease − Beat (300 ms by default), where one sent only
// after the last was answered needed d ≤ ServeLease/2: on the storm's
// loaded host the new leader's gate closed again and again with no
// heartbeat failing, each answered 200-400 ms after it was sent. (The
// deadline is the largest sent + ServeLease of the answered ones, so
// the argument of doc.go holds for heartbeats in any order.) A
// heartbeat that fails is not retried; the next tick sends another, and
// the gate closes by itself when none is answered for ServeLease.
func (n *Node) beatLoop(ctx context.Context, t *Term) {
	tick := time.NewTicker(n.cfg.Beat)
	defer tick.Stop()
	most := max(int(n.cfg.ServeLease/n.cfg.Beat), 1)
	done := make(chan error, most) // room for every heartbeat in flight: none blocks after the loop returns
	inflight, fails := 0, 0
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-t.done:
			return
		case <-tick.C:
			if inflight < most {
				inflight++
				go func() { done <- n.beat(ctx, t) }()
			}
			continue
		case err = <-done:
			inflight--
		}
		switch {
		case errors.Is(err, errDeposed):
			t.end(endDeposed)
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if fails++; fails == 1 || fails%20 == 0 {
				n.log.Warn("ha: heartbeat failed", "err", err, "fails", fails,
					"serving_for", max(t.serve.remaining(), 0).Round(time.Millisecond))
			}
		default:
			fails = 0
		}
	}
}

// beatView is what a standby knows of the leader and its heartbeat.
type beatView struct {
	leaderKey string // election key with the lowest create revision
	leaderRev int64
	leaderVal string // its advertised address
	beatRev   int64  // mod revision of the heartbeat key (0: none)
	beatKey   string // the term the heartbeat names
	beatTerm  int64
}

// deposable: the heartbeat was written by the current leader's term, so
// that term serves only under its serving lease (a leader that runs
// without one never writes a heartbeat naming its term, and is never
// deposed by this).
func (v *beatView) deposable() bool {
	return v.leaderKey != "" && v.beatRev != 0 && v.beatKey == v.leaderKey && v.beatTerm == v.leaderRev
}

func (v *beatView) setBeat(kv []byte, modRev int64) {
	v.beatRev = modRev
	v.beatKey, v.beatTerm, _ = parseBeat(kv)
}

// readBeat reads the heartbeat and the leader's election key at one
// revision.
func (n *Node) readBeat(ctx context.Context) (beatView, int64, error) {
	gctx, cancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
	defer cancel()
	resp, err := n.cli.Txn(gctx).Then(
		clientv3.OpGet(n.cfg.beatKey()),
		clientv3.OpGet(n.cfg.electionPrefix()+"/", clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return beatView{}, 0, err
	}
	var v beatView
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		v.setBeat(kvs[0].Value, kvs[0].ModRevision)
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		v.leaderKey, v.leaderRev, v.leaderVal = string(kvs[0].Key), kvs[0].CreateRevision, string(kvs[0].Value)
	}
	return v, resp.Header.Revision, nil
}

// detect deposes a leader whose heartbeat has not moved for
// TakeoverAfter on this instance's monotonic clock, counted from when
// this instance received the heartbeat (after etcd committed it, so after
// the leader read its clock for it). The deposition deletes the leader's
// election key in a transaction conditioned on the heartbeat's mod
// revision being the one seen and on the key's create revision: if the
// leader renewed meanwhile, nothing happens. The next candidate in the
// election then wins.
func (n *Node) detect(ctx context.Context) {
	wait := n.cfg.TakeoverAfter()
	for ctx.Err() == nil {
		v, rev, err := n.readBeat(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		n.noteBeat(v.deposable())
		timer := time.NewTimer(wait) // from the read's answer
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		bch := n.cli.Watch(wctx, n.cfg.beatKey(), clientv3.WithRev(rev+1))
		ech := n.cli.Watch(wctx, n.cfg.electionPrefix()+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	watch:
		for {
			select {
			case <-ctx.Done():
				break watch
			case wr, ok := <-bch:
				if !ok || wr.Err() != nil {
					break watch
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete {
						v.setBeat(nil, 0)
					} else {
						v.setBeat(ev.Kv.Value, ev.Kv.ModRevision)
					}
				}
				n.noteBeat(v.deposable())
				timer.Reset(wait) // from this heartbeat's arrival
			case wr, ok := <-ech:
				_ = wr
				_ = ok
				break watch // candidates or leader changed: read again
			case <-timer.C:
				if v.deposable() && v.leaderVal != n.cfg.Advertise && n.term.Load() == nil {
					if !n.etcdPrompt(ctx, v) {
						// etcd, not the leader, may be what is slow: the
						// leader's heartbeats wait as this write did. It
						// gets a whole wait from now.
						timer.Reset(wait)
						continue
					}
					n.depose(ctx, v, wait)
				}
				// Deposed or renewed: the watches say so. An error: try
				// again shortly, still conditioned on the same heartbeat.
				timer.Reset(n.cfg.Beat)
			}
		}
		timer.Stop()
		wcancel()
	}
}

// etcdPrompt reports whether etcd commits a write promptly, as the
// leader's heartbeat needs it to: within half the serving lease. The
// write (this instance's probe key) is conditioned on the heartbeat
// still being the one in v; false when it was not (the heartbeat moved:
// the watch brings it). A standby deposes a silent leader only after
// etcd answered it promptly: when etcd itself is slow (a loaded host, a
// slow disk, a storm of reconnecting clients), the leader's heartbeats
// time out and its serving lease lapses, so it serves nothing meanwhile,
// but deposing it would only hand the same slow etcd to another leader,
// and every change of leader sends every client to reconnect, which
// loads the hosts further (the storm test saw leadership flap between
// two instances every 2-4 s for a minute). Safety does not depend on it:
// see doc.go.
func (n *Node) etcdPrompt(ctx context.Context, v beatView) bool {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, n.cfg.ServeLease)
	defer cancel()
	resp, err := n.cli.Txn(pctx).If(
		clientv3.Compare(clientv3.ModRevision(n.cfg.beatKey()), "=", v.beatRev),
	).Then(clientv3.OpPut(n.cfg.probeKey(), n.cfg.Advertise)).Commit()
	took := time.Since(start)
	switch {
	case err != nil, took > n.cfg.ServeLease/2:
		n.m.slowEtcd.Inc()
		if n.deferrals++; n.deferrals%20 != 1 {
			return false
		}
		n.log.Warn("ha: the leader's heartbeat stopped, but etcd is slow too: not deposing it", "leader", v.leaderVal,
			"write_took", took.Round(time.Millisecond), "err", err, "times", n.deferrals)
		return false
	case !resp.Succeeded:
		return false // renewed
	}
	return true
}

// depose deletes the leader's election key if its heartbeat is still
// the one in v.
func (n *Node) depose(ctx context.Context, v beatView, waited time.Duration) {
	dctx, cancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
	defer cancel()
	resp, err := n.cli.Txn(dctx).If(
		clientv3.Compare(clientv3.ModRevision(n.cfg.beatKey()), "=", v.beatRev),
		clientv3.Compare(clientv3.CreateRevision(v.leaderKey), "=", v.leaderRev),
	).Then(clientv3.OpDelete(v.leaderKey)).Commit()
	switch {
	case err != nil:
		n.log.Warn("ha: deposing a silent leader failed", "leader", v.leaderVal, "err", err)
	case resp.Succeeded:
		n.m.deposed.Inc()
		n.log.Warn("ha: deposed the leader: its heartbeat stopped", "leader", v.leaderVal, "key", v.leaderKey,
			"beat_rev", v.beatRev, "silent_for_at_least", waited.Round(time.Millisecond))
	}
}
