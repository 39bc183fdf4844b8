package admin

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// DefaultSessionLease is the lease seqd grants by default (cmd/seqd
// -session-lease): a client that neither renews (KeepAlive, which the
// client library sends every third of the lease) nor disconnects within
// it is disconnected.
const DefaultSessionLease = 30 * time.Second

// MaxKeepAliveSessions bounds the session tokens one KeepAlive may carry.
const MaxKeepAliveSessions = 1024

// TokenLen is the length of a session token.
const TokenLen = adminclient.TokenLen

// token is a session's capability: 128 bits from crypto/rand, handed out
// by Connect and needed by KeepAlive and Disconnect. A backend numbers
// its sessions from 1 on every data path (mode, restart, leadership
// term), so a bare ID can name another client's session after an epoch
// change; a token names exactly one session of one epoch, and guessing
// one takes 2^128 tries.
type token [TokenLen]byte

// sessions is the admin server's record of every session it granted:
// the backend's ID and epoch behind each token, and the lease deadline
// when the server grants leases. It is bounded by the backend's sessions:
// a record goes at Disconnect, at lease expiry, and as soon as a Connect
// shows that the backend runs a newer epoch (whose data path no longer
// holds the older sessions). Epochs are ordered: a Connect answered in an
// older epoch than the table's, but recorded after it, is refused and
// erases nothing (add).
type sessions struct {
	ttl     time.Duration // 0: no leases; sessions last until Disconnect
	mu      sync.Mutex
	m       map[token]grant
	epoch   uint64        // the epoch of the records (0: none yet)
	gen     uint64        // bumped whenever epoch changes
	expired atomic.Uint64 // sessions disconnected because their lease ran out
	// Connects that named a session to replace (ConnectRequest.replaces):
	// byPrev maps the value they named to the session the last of them
	// created (one entry per live session at most), busy the values of
	// those in progress.
	byPrev map[token]token
	busy   map[token]bool
	// owners counts, per quota key (quotas.key), the records and the
	// Connects in progress (reserve) that key holds, and their receives
	// (reserveRecv).
	owners map[string]holding
}

// holding is what one quota key holds: sessions (records and Connects in
// progress) and their receives (QPs × window, reserved or granted).
type holding struct{ sessions, recv int }

type grant struct {
	id, epoch uint64
	deadline  time.Time // zero without leases
	prev      token     // the replaces value of the Connect that created it
	hasPrev   bool
	owner     string // the quota key it counts against ("": none)
	recv      int    // its receives (QPs × granted window), counted against owner
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[token]grant{}, byPrev: map[token]token{}, busy: map[token]bool{}, owners: map[string]holding{}}
}

// epochView is what add needs to know about the epoch a Connect was
// answered in: the table's generation when the caller looked (view), and
// the epoch the backend runs now (current, when known).
type epochView struct {
	gen     uint64
	current uint64
	known   bool
}

// view returns the table's generation and whether epoch is the table's
// own (or the table has none yet), in which case add needs no more.
func (s *sessions) view(epoch uint64) (gen uint64, settled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.epoch == 0 || s.epoch == epoch
}

// errStaleEpoch: a Connect was answered in an epoch older than the one
// the table holds; its session belongs to a data path that is gone.
var errStaleEpoch = errors.New("stale epoch")

// errEpochMoved: the table's epoch changed since the caller's view; look
// again.
var errEpochMoved = errors.New("epoch moved")

// add records a session the backend granted, in epoch, to a Connect of
// owner (whose reserve, and reserveRecv of recv receives, it turns into a
// record) that named replaces (nil: none) and released old (nil: none),
// and returns its token.
//
// A Connect answered in the table's epoch is recorded. One of another
// epoch is first placed in order: the newest epoch is the one the backend
// runs (v.current, asked after the table's generation v.gen was read), or
// without that answer the larger number. A session of the newest epoch
// replaces the table's records of every other epoch; one of an older
// epoch is refused (errStaleEpoch) and erases nothing: the caller releases
// it. errEpochMoved: the table's epoch changed after v was taken.
func (s *sessions) add(id, epoch uint64, now time.Time, replaces []byte, old *token, owner string, recv int, v epochView) (token, error) {
	var t token
	rand.Read(t[:]) // never fails (crypto/rand aborts the program instead)
	g := grant{id: id, epoch: epoch, owner: owner, recv: recv}
	if s.ttl > 0 {
		g.deadline = now.Add(s.ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old != nil {
		s.drop(*old) // the backend released it, whatever happens here
	}
	if s.epoch != 0 && epoch != s.epoch {
		newest := max(epoch, s.epoch)
		if v.known {
			if v.gen != s.gen {
				return token{}, errEpochMoved
			}
			newest = v.current
		}
		if epoch != newest {
			return token{}, fmt.Errorf("%w: connect answered in epoch %d, but this data path runs epoch %d", errStaleEpoch, epoch, newest)
		}
	}
	if epoch != s.epoch {
		// A new data path: the records of the old one name sessions
		// that no longer exist.
		for k, o := range s.m {
			if o.epoch != epoch {
				s.drop(k)
			}
		}
		s.epoch = epoch
		s.gen++
	}
	if len(replaces) == TokenLen {
		g.prev, g.hasPrev = token(replaces), true
		s.byPrev[g.prev] = t
	}
	s.m[t] = g
	return t, nil
}

// reserve counts one Connect in progress against owner, unless owner
// already holds most (negative: no limit) and the Connect does not
// replace one of owner's own sessions; held is what owner holds. A
// successful reserve ends in add (its record then counts) or in
// unreserve.
func (s *sessions) reserve(owner string, most int, replacesOwn bool) (held int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.owners[owner]
	if most >= 0 && h.sessions >= most && !replacesOwn {
		return h.sessions, false
	}
	h.sessions++
	s.owners[owner] = h
	return h.sessions - 1, true
}

// reserveRecv counts, after reserve, the receives of a Connect in
// progress of qps QPs at window against owner: at most most receives in
// all (negative: no limit), of which freed are those of the session the
// Connect replaces (still counted until add drops it). When they do not
// fit, the window is lowered so that they do (window); ok is false when
// not even one receive a QP fits. held is what owner holds before it.
// unreserve(owner, qps*window) undoes it, or add records it.
func (s *sessions) reserveRecv(owner string, most, freed, qps, window int) (granted, held int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.owners[owner]
	if most >= 0 {
		room := most - h.recv + freed
		if room < qps {
			return 0, h.recv, false
		}
		window = min(window, room/qps)
	}
	held = h.recv
	h.recv += qps * window
	s.owners[owner] = h
	return window, held, true
}

// adjustRecv moves owner's receives by d: a Connect reserved more (or
// fewer) than the backend granted.
func (s *sessions) adjustRecv(owner string, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.owners[owner]
	h.recv += d
	s.owners[owner] = h
}

// unreserve ends a reserve, and its reserveRecv of recv receives, whose
// Connect made no record.
func (s *sessions) unreserve(owner string, recv int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(owner, recv)
}

// release takes one session and recv receives off owner. Called with
// s.mu held.
func (s *sessions) release(owner string, recv int) {
	h := s.owners[owner]
	h.sessions--
	h.recv -= recv
	if h.sessions > 0 || h.recv > 0 {
		s.owners[owner] = h
	} else {
		delete(s.owners, owner)
	}
}

// held is what owner holds: sessions (and Connects in progress) and
// their receives.
func (s *sessions) held(owner string) holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[owner]
}

// drop forgets the session of k. Called with s.mu held.
func (s *sessions) drop(k token) {
	g, ok := s.m[k]
	if !ok {
		return
	}
	delete(s.m, k)
	if g.owner != "" {
		s.release(g.owner, g.recv)
	}
	if g.hasPrev && s.byPrev[g.prev] == k {
		delete(s.byPrev, g.prev)
	}
}

// claim resolves a Connect's replaces value r to the session it
// releases: the session of token r, or else the one an earlier Connect
// naming r created (the caller never heard its answer), found false when
// there is none. It fails while another Connect naming r is in progress;
// otherwise the caller must call unclaim(r) when done.
func (s *sessions) claim(r []byte) (g grant, tok token, found bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := token(r)
	if s.busy[k] {
		return grant{}, token{}, false, fmt.Errorf("%w: connect: another Connect replacing the same session is in progress; retry", ErrUnavailable)
	}
	s.busy[k] = true
	if g, ok := s.m[k]; ok {
		return g, k, true, nil
	}
	if t, ok := s.byPrev[k]; ok {
		if g, ok := s.m[t]; ok {
			return g, t, true, nil
		}
	}
	return grant{}, token{}, false, nil
}

func (s *sessions) unclaim(r []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, token(r))
}

// take removes and returns the session of tok.
func (s *sessions) take(tok []byte) (grant, bool) {
	if len(tok) != TokenLen {
		return grant{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.m[token(tok)]
	s.drop(token(tok))
	return g, ok
}

// renew extends the leases of toks and returns the tokens it does not
// hold.
func (s *sessions) renew(toks [][]byte, now time.Time) (unknown [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range toks {
		g, ok := s.m[token(t)]
		if len(t) != TokenLen || !ok {
			unknown = append(unknown, t)
			continue
		}
		if s.ttl > 0 {
			g.deadline = now.Add(s.ttl)
			s.m[token(t)] = g
		}
	}
	return unknown
}

// takeExpired removes and returns the sessions past their lease.
func (s *sessions) takeExpired(now time.Time) []grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []grant
	for k, g := range s.m {
		if !g.deadline.IsZero() && now.After(g.deadline) {
			out = append(out, g)
			s.drop(k)
		}
	}
	return out
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// reap disconnects, every quarter lease until stop is closed, the
// sessions whose lease ran out. The backend releases a session only if
// it still runs the session's epoch (DisconnectRequest.epoch).
func (s *Server) reap(stop <-chan struct{}) {
	l := s.sessions
	t := time.NewTicker(max(l.ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		exp := l.takeExpired(time.Now())
		if len(exp) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, g := range exp {
			if err := s.backend.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: g.id, Epoch: g.epoch}); err == nil {
				l.expired.Add(1)
				s.log.Info("session lease expired; disconnected", "session", g.id, "lease", l.ttl)
			}
		}
		cancel()
	}
}

// ExpiredSessions is how many sessions were disconnected because their
// lease ran out.
func (s *Server) ExpiredSessions() uint64 { return s.sessions.expired.Load() }

// Sessions is how many sessions the server holds a token for.
func (s *Server) Sessions() int { return s.sessions.len() }

func validateTokens(toks [][]byte) error {
	if n := len(toks); n == 0 || n > MaxKeepAliveSessions {
		return fmt.Errorf("%w: keep-alive: %d session tokens, want 1..%d (protocol version 2 names sessions by token, not ID)", ErrInvalidArgument, n, MaxKeepAliveSessions)
	}
	for i, t := range toks {
		if len(t) != TokenLen {
			return fmt.Errorf("%w: keep-alive: session_tokens[%d] is %d bytes, want %d", ErrInvalidArgument, i, len(t), TokenLen)
		}
	}
	return nil
}

// CheckEpoch is the backends' half of the rule that a session ID never
// names a session of another epoch: it returns ErrUnknownSession when
// req names an epoch (non-zero) other than epoch, the one the backend
// runs. The admin server always names the epoch it recorded at Connect.
func CheckEpoch(req *adminpb.DisconnectRequest, epoch uint64) error {
	if e := req.GetEpoch(); e != 0 && e != epoch {
		return fmt.Errorf("%w: session %d of epoch %d; this data path runs epoch %d", ErrUnknownSession, req.GetSessionId(), e, epoch)
	}
	return nil
}
