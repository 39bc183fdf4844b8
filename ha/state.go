package ha

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The group's state is what an admin call sets and every later term must
// keep (the data-path mode): small values under Prefix+"/state/"+name,
// written only by the leader, in a transaction guarded by its term's
// election key like the mark. A deposed leader's write is refused; a new
// term reads the state after its win, so it starts where the group was.

// LoadState reads the group's state name with a linearizable read: ok is
// false when it was never written.
func (t *Term) LoadState(ctx context.Context, name string) (val string, ok bool, err error) {
	key := t.n.cfg.stateKey(name)
	resp, err := t.store.kv.Get(ctx, key)
	if err != nil {
		return "", false, fmt.Errorf("ha: load %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// SaveState writes the group's state name in one transaction guarded by
// the term's election key (its create revision): it returns ErrNotLeader,
// and ends the term, when the key has changed. An error other than
// ErrNotLeader leaves the outcome unknown: the caller reports it, and a
// retry writes the same value again.
func (t *Term) SaveState(ctx context.Context, name, val string) error {
	key := t.n.cfg.stateKey(name)
	if err := t.Gate(); err != nil {
		return fmt.Errorf("%w: term %d cannot save %s", err, t.Rev, key)
	}
	resp, err := t.store.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.Key), "=", t.Rev)).
		Then(clientv3.OpPut(key, val)).
		Commit()
	if err != nil {
		return fmt.Errorf("ha: save %s = %q: %w", key, val, err)
	}
	if !resp.Succeeded {
		t.store.m.refused.notLeader.Inc()
		if t.store.onLost != nil {
			t.store.onLost()
		}
		return fmt.Errorf("%w: save of %s = %q refused: election key %s (revision %d) is gone", ErrNotLeader, key, val, t.Key, t.Rev)
	}
	return nil
}
