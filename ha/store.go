package ha

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/oracle"
)

// Store is the oracle.Store of one leadership term: it keeps the mark
// under one etcd key and writes it only while the term's election key still
// stands. It is safe for concurrent use, though the oracle saves from one
// goroutine.
type Store struct {
	kv        clientv3.KV
	key       string // the mark
	leaderKey string // the term's election key
	leaderRev int64  // its create revision
	onLost    func() // called when a save finds the term gone; may be nil
	m         *metrics

	mu     sync.Mutex
	exists bool   // the mark key existed at the last Load or Save
	last   uint64 // highest mark loaded or saved
}

var _ oracle.Store = (*Store)(nil)

// NewStore returns a Store that writes the mark under key, guarded by the
// election key leaderKey with create revision leaderRev. onLost, if not
// nil, is called when a save is refused because the election key changed.
// Node.Run builds one per term; tests build them directly.
func NewStore(kv clientv3.KV, key, leaderKey string, leaderRev int64, onLost func()) *Store {
	return &Store{kv: kv, key: key, leaderKey: leaderKey, leaderRev: leaderRev, onLost: onLost, m: &nopMetrics}
}

// encodeMark formats a mark as 16 lowercase hex digits, so that etcd's
// byte-wise value comparison orders marks numerically.
func encodeMark(m uint64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(m >> (56 - 8*i))
	}
	return hex.EncodeToString(b[:])
}

// decodeMark parses what encodeMark wrote; anything else is ErrCorrupt.
func decodeMark(v []byte) (uint64, error) {
	if len(v) != 16 {
		return 0, fmt.Errorf("%w: %d bytes, want 16 hex digits", ErrCorrupt, len(v))
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], v); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	for _, c := range v { // hex.Decode accepts upper case; encodeMark never writes it
		if c >= 'A' && c <= 'F' {
			return 0, fmt.Errorf("%w: upper-case hex", ErrCorrupt)
		}
	}
	var m uint64
	for _, x := range b {
		m = m<<8 | uint64(x)
	}
	return m, nil
}

// Load reads the mark with a linearizable read: 0 when there is none yet,
// an error when it exists but is not a mark.
func (s *Store) Load(ctx context.Context) (uint64, error) {
	resp, err := s.kv.Get(ctx, s.key)
	if err != nil {
		return 0, fmt.Errorf("ha: load mark %s: %w", s.key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(resp.Kvs) == 0 {
		s.exists = false
		return 0, nil
	}
	m, err := decodeMark(resp.Kvs[0].Value)
	if err != nil {
		return 0, fmt.Errorf("ha: load mark %s: %w", s.key, err)
	}
	s.exists = true
	s.last = max(s.last, m)
	return m, nil
}

// Save writes mark in one transaction guarded by the term's leadership
// (the election key's create revision) and by the stored mark being below
// mark. It returns ErrNotLeader (and calls onLost) when the term is gone,
// ErrMarkNotIncreasing when the stored mark is not below mark.
func (s *Store) Save(ctx context.Context, mark uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark <= s.last {
		s.m.refused.notIncreasing.Inc()
		return fmt.Errorf("%w: %d is not above %d", ErrMarkNotIncreasing, mark, s.last)
	}
	val := encodeMark(mark)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.leaderKey), "=", s.leaderRev)}
	if s.exists {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(s.key), "<", val))
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.key), "=", 0))
	}
	resp, err := s.kv.Txn(ctx).If(cmps...).
		Then(clientv3.OpPut(s.key, val)).
		Else(clientv3.OpGet(s.leaderKey), clientv3.OpGet(s.key)).
		Commit()
	if err != nil {
		s.m.saveErrors.Inc()
		return fmt.Errorf("ha: save mark %d: %w", mark, err)
	}
	if resp.Succeeded {
		s.exists = true
		s.last = mark
		return nil
	}
	lk := resp.Responses[0].GetResponseRange().GetKvs()
	if len(lk) == 0 || lk[0].CreateRevision != s.leaderRev {
		s.m.refused.notLeader.Inc()
		if s.onLost != nil {
			s.onLost()
		}
		return fmt.Errorf("%w: save of mark %d refused: election key %s (revision %d) is gone", ErrNotLeader, mark, s.leaderKey, s.leaderRev)
	}
	s.m.refused.notIncreasing.Inc()
	mk := resp.Responses[1].GetResponseRange().GetKvs()
	if len(mk) == 0 {
		// The mark we saw was deleted behind our back: refuse rather
		// than guess; the next Load starts over.
		s.exists = false
		return fmt.Errorf("%w: mark key %s vanished; refusing to save %d", ErrMarkNotIncreasing, s.key, mark)
	}
	cur, derr := decodeMark(mk[0].Value)
	if derr != nil {
		return fmt.Errorf("ha: save mark %d: %w", mark, derr)
	}
	s.exists = true
	s.last = max(s.last, cur)
	return fmt.Errorf("%w: stored mark %d is not below %d", ErrMarkNotIncreasing, cur, mark)
}

// IsNotLeader reports whether err means the term is over.
func IsNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }
