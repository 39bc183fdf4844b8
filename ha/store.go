package ha

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
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
	// fresh says whether a missing mark may be taken as mark 0 (the
	// Node's -init or -advance consent, while it lasts); nil: never.
	fresh func() bool
	// seen is called whenever the mark is found or written: the consent
	// to a missing mark ends there. May be nil.
	seen func()
	// endpoints and prefix name the group in ErrNoMark.
	endpoints []string
	prefix    string
	// witness, when not nil, is the instance's memory of the highest mark
	// it has seen: Load refuses a mark below it (ErrMarkBehind) unless
	// advance, or clockFloor (hybrid: the lowest value a term can start
	// at now), is at or above it; every mark found or written raises it.
	witness    *Witness
	advance    uint64
	clockFloor func() uint64
	warn       func(msg string, args ...any)

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

// Load reads the mark with a linearizable read: an error when it exists
// but is not a mark. A missing mark is ErrNoMark, naming the endpoints,
// the prefix and both ways out, unless the Node consents to a fresh start
// (Config.Init or Config.Advance, until a mark is seen): then it is 0.
func (s *Store) Load(ctx context.Context) (uint64, error) {
	resp, err := s.kv.Get(ctx, s.key)
	if err != nil {
		return 0, fmt.Errorf("ha: load mark %s: %w", s.key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.witness != nil && resp.Header != nil {
		s.checkCluster(resp.Header.ClusterId)
	}
	if len(resp.Kvs) == 0 {
		s.exists = false
		if s.fresh != nil && s.fresh() {
			// -init or -advance consents to a missing mark, but not
			// below what this instance has seen: that is a wiped etcd.
			if err := s.checkWitness(0, false); err != nil {
				return 0, err
			}
			return 0, nil
		}
		return 0, s.noMark()
	}
	m, err := decodeMark(resp.Kvs[0].Value)
	if err != nil {
		return 0, fmt.Errorf("ha: load mark %s: %w", s.key, err)
	}
	if err := s.checkWitness(m, true); err != nil {
		return 0, err
	}
	if err := s.witnessed(m); err != nil {
		return 0, err
	}
	s.exists = true
	s.last = max(s.last, m)
	if s.seen != nil {
		s.seen()
	}
	return m, nil
}

// checkWitness refuses etcd's mark m (exists false: no mark) when it is
// below the witness and nothing else floors the term above the witness:
// the instance has seen a higher mark, so etcd lost marks (a restored
// snapshot, a wiped etcd) or the prefix names another group, and values
// above m have been served. s.mu is held.
func (s *Store) checkWitness(m uint64, exists bool) error {
	if s.witness == nil {
		return nil
	}
	wm, ok := s.witness.Mark()
	if !ok || (exists && m >= wm) {
		return nil
	}
	what := fmt.Sprintf("holds mark %d under key %s", m, s.key)
	if !exists {
		what = fmt.Sprintf("has no mark under key %s", s.key)
	}
	if s.advance >= wm {
		s.logWarn("ha: etcd's mark is below this instance's witness; -advance floors every value above both",
			"key", s.key, "etcd_mark", m, "etcd_mark_exists", exists, "witness", wm, "witness_file", s.witness.Path(), "advance", s.advance)
		return nil
	}
	if s.clockFloor != nil {
		if f := s.clockFloor(); f > wm {
			s.logWarn("ha: etcd's mark is below this instance's witness; the hybrid clock floors every value above both",
				"key", s.key, "etcd_mark", m, "etcd_mark_exists", exists, "witness", wm, "witness_file", s.witness.Path(), "clock_floor", f)
			return nil
		}
	}
	eps := "etcd"
	if len(s.endpoints) > 0 {
		eps = "etcd " + strings.Join(s.endpoints, ",")
	}
	pfx := ""
	if s.prefix != "" {
		pfx = fmt.Sprintf(" (prefix %q)", s.prefix)
	}
	return fmt.Errorf("%w: %s%s %s, but this instance has seen the group's mark at %d (witness %s): "+
		"a restored etcd snapshot, a wiped etcd, or another group's prefix? Serving from etcd's mark would serve values again. "+
		"Check -etcd-endpoints and -etcd-prefix; after restoring etcd, restart every instance with -advance VALUE "+
		"above every value the group ever served: at least %d (this witness; take the highest over every instance's witness "+
		"and your monitoring's seqd_oracle_persisted_mark, plus a margin)", ErrMarkBehind, eps, pfx, what, wm, s.witness.Path(), wm)
}

// witnessed raises the witness to m, a mark found or written in etcd.
// s.mu is held.
func (s *Store) witnessed(m uint64) error {
	if s.witness == nil {
		return nil
	}
	return s.witness.Raise(m)
}

// checkCluster records etcd's cluster ID in the witness and warns when it
// changed: a restored snapshot usually comes back as a new cluster. Only a
// warning: a cluster can be migrated legitimately (the mark check decides).
func (s *Store) checkCluster(id uint64) {
	prev, changed, err := s.witness.Cluster(id)
	if err != nil {
		s.logWarn("ha: recording etcd's cluster ID failed", "err", err)
	}
	if changed {
		s.logWarn("ha: etcd's cluster ID changed since this instance last read the mark: a restored snapshot or a migrated cluster; "+
			"the mark is checked against this instance's witness",
			"cluster_id", fmt.Sprintf("%x", id), "previous", fmt.Sprintf("%x", prev), "witness_file", s.witness.Path())
	}
}

func (s *Store) logWarn(msg string, args ...any) {
	if s.warn != nil {
		s.warn(msg, args...)
	}
}

// noMark is the refusal to start without a mark.
func (s *Store) noMark() error {
	where := fmt.Sprintf("key %s", s.key)
	if s.prefix != "" {
		where = fmt.Sprintf("prefix %q (key %s)", s.prefix, s.key)
	}
	eps := "etcd"
	if len(s.endpoints) > 0 {
		eps = "etcd " + strings.Join(s.endpoints, ",")
	}
	return fmt.Errorf("%w: %s has no mark under %s; refusing to start from zero, which would serve again "+
		"values this group may have served (a mistyped -etcd-prefix or a wiped etcd looks exactly like a new group). "+
		"Check -etcd-endpoints and -etcd-prefix; for a new group, start once with -init; "+
		"after losing the mark, start with -advance VALUE above every value ever served", ErrNoMark, eps, where)
}

// Save writes mark in one transaction guarded by the term's leadership
// (the election key's create revision) and by the stored mark being below
// mark. It returns ErrNotLeader (and calls onLost) when the term is gone,
// ErrMarkNotIncreasing when the stored mark is not below mark.
//
// A transaction that returns an error may still have committed (the
// request reached etcd, the answer was lost). Save resolves that
// ambiguity instead of leaving it to a retry, which the guards would
// refuse as "not increasing" for ever (a counter-format leader whose
// claims cannot move the target would never serve again): it re-reads the
// election key and the mark in one revision, and if the mark holds exactly
// this target while the term's election key still stands, the write
// succeeded. Nothing else can have put that target there: every mark of an
// earlier term is at or below the mark this term loaded after its win, and
// this term's targets are above it. A retry of the target that finds it
// already stored is resolved the same way.
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
		return s.resolve(ctx, mark, err)
	}
	if resp.Succeeded {
		s.exists = true
		s.last = mark
		if s.seen != nil {
			s.seen()
		}
		return s.saved(mark)
	}
	return s.refused(mark, resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs())
}

// saved witnesses mark, stored in etcd, before Save returns, so that
// nothing is served from it before the witness holds it. A witness that
// cannot be written ends the term (fail closed): a later term, here or
// elsewhere, loads the mark again. s.mu is held.
func (s *Store) saved(mark uint64) error {
	if err := s.witnessed(mark); err != nil {
		if s.onLost != nil {
			s.onLost()
		}
		return fmt.Errorf("ha: mark %d saved in etcd, but not witnessed: %w", mark, err)
	}
	return nil
}

// resolve settles a save of mark whose transaction failed with txnErr and
// may or may not have committed: one linearizable read of the election key
// and the mark decides. It returns nil when the mark holds this target
// under this term, the refusal the transaction's guards would have given
// when they would have refused it, and txnErr when the read fails too or
// the target is not stored (the write did not happen: a retry may make
// it). s.mu is held.
func (s *Store) resolve(ctx context.Context, mark uint64, txnErr error) error {
	resp, err := s.kv.Txn(ctx).Then(clientv3.OpGet(s.leaderKey), clientv3.OpGet(s.key)).Commit()
	if err != nil {
		return fmt.Errorf("ha: save mark %d: %w (outcome unknown: re-reading the mark failed too: %v)", mark, txnErr, err)
	}
	lk := resp.Responses[0].GetResponseRange().GetKvs()
	mk := resp.Responses[1].GetResponseRange().GetKvs()
	if len(lk) == 0 || lk[0].CreateRevision != s.leaderRev {
		return s.refused(mark, lk, mk)
	}
	if len(mk) == 1 && string(mk[0].Value) == encodeMark(mark) && mk[0].ModRevision > s.leaderRev {
		s.m.ambiguousResolved.Inc()
		s.exists = true
		if s.seen != nil {
			s.seen()
		}
		s.last = mark
		return s.saved(mark)
	}
	return fmt.Errorf("ha: save mark %d: %w (not stored: the write did not happen)", mark, txnErr)
}

// refused explains a save of mark that the guards refused, from the
// election key lk and the mark mk read in the same revision. s.mu is held.
func (s *Store) refused(mark uint64, lk, mk []*mvccpb.KeyValue) error {
	if len(lk) == 0 || lk[0].CreateRevision != s.leaderRev {
		s.m.refused.notLeader.Inc()
		if s.onLost != nil {
			s.onLost()
		}
		return fmt.Errorf("%w: save of mark %d refused: election key %s (revision %d) is gone", ErrNotLeader, mark, s.leaderKey, s.leaderRev)
	}
	if len(mk) == 1 && string(mk[0].Value) == encodeMark(mark) && mk[0].ModRevision > s.leaderRev {
		// An earlier save of this very target committed during this term
		// but returned an error (and its re-read failed): it succeeded.
		s.m.ambiguousResolved.Inc()
		s.exists = true
		if s.seen != nil {
			s.seen()
		}
		s.last = max(s.last, mark)
		return s.saved(mark)
	}
	s.m.refused.notIncreasing.Inc()
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
