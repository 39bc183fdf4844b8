package admin

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
)

// Quota bounds what one caller of Connect may take: a peer (the source
// address of the gRPC connection; IPv6 addresses by their /64, which one
// host usually holds whole) or, when the caller authenticated, an
// identity. Zero fields impose no limit (seqd's flags set its defaults);
// negative ones neither.
type Quota struct {
	// MaxSessions is the most sessions the caller may hold at once,
	// counting its Connects in progress. A Connect that replaces one of
	// the caller's own sessions (ConnectRequest.replaces) is never
	// refused by it.
	MaxSessions int
	// ConnectRate is how many Connects a second the caller may make in
	// the long run, ConnectBurst how many at once (a token bucket; burst
	// at least 1, default max(1, rate)). A Connect refused for its rate
	// takes no token.
	ConnectRate  float64
	ConnectBurst int
	// MaxRecv is the most receives the caller's sessions may hold
	// together: the sum over its sessions of QPs × granted window (the
	// data path's receive buffers, HERD's slots), its Connects in
	// progress counted at the window they ask for. A Connect that does
	// not fit gets a smaller window, as at the per-session cap (seqd
	// -max-session-recv), and is refused only when not one receive a QP
	// fits. The receives of the session a Connect replaces count as
	// free. Without it one caller can hold every receive of every worker
	// through many sessions, each within its cap.
	MaxRecv int
}

func (q Quota) validate(name string) (Quota, error) {
	if math.IsNaN(q.ConnectRate) || math.IsInf(q.ConnectRate, 0) {
		return q, fmt.Errorf("admin: config: %s.ConnectRate %v", name, q.ConnectRate)
	}
	if q.MaxSessions <= 0 {
		q.MaxSessions = -1
	}
	if q.MaxRecv <= 0 {
		q.MaxRecv = -1
	}
	if q.ConnectRate <= 0 {
		q.ConnectRate, q.ConnectBurst = 0, 0
	} else if q.ConnectBurst <= 0 {
		q.ConnectBurst = max(1, int(math.Ceil(q.ConnectRate)))
	}
	return q, nil
}

// Reasons a Connect is refused before it reaches the backend (or, for
// stale_epoch, after), as the admission refusals metric labels them.
const (
	ReasonPeerSessions     = "peer_sessions"
	ReasonPeerRate         = "peer_rate"
	ReasonIdentitySessions = "identity_sessions"
	ReasonIdentityRate     = "identity_rate"
	ReasonStaleEpoch       = "stale_epoch"
	ReasonPeerRecv         = "peer_recv"
	ReasonIdentityRecv     = "identity_recv"
	// Admission control (admission.go): a Connect refused with a
	// retry-after while -admin-max-connects are in hand, a TLS
	// handshake that waited too long for one of -admin-max-handshakes.
	ReasonBusy       = "busy"
	ReasonHandshakes = "handshakes"
)

// refusalReasons are the reasons, in the order of Metrics' counters.
var refusalReasons = [...]string{ReasonPeerSessions, ReasonPeerRate, ReasonIdentitySessions, ReasonIdentityRate, ReasonStaleEpoch,
	ReasonPeerRecv, ReasonIdentityRecv, ReasonBusy, ReasonHandshakes}

// maxBuckets bounds the token buckets quotas keeps (one per caller that
// connected recently); callers beyond it share one.
const maxBuckets = 1 << 16

// quotas enforces Config.PeerQuota and Config.IdentityQuota. Session
// counts live in the session table (sessions.reserve); quotas keeps the
// Connect-rate buckets and counts refusals.
type quotas struct {
	peer, ident Quota
	now         func() time.Time

	mu       sync.Mutex
	buckets  map[string]*bucket
	overflow bucket    // for callers beyond maxBuckets
	swept    time.Time // the last sweep, at most one a second

	refused [len(refusalReasons)]atomic.Uint64
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newQuotas(peer, ident Quota) *quotas {
	return &quotas{peer: peer, ident: ident, now: time.Now, buckets: map[string]*bucket{}}
}

// caller is who a Connect counts against.
type caller struct {
	key      string // the session table's owner key
	name     string // for messages: the address or identity
	identity bool
	q        Quota
}

// callerOf is the caller of ctx: its identity when auth verifies one
// (an allowed client-certificate identity or a listed bearer token),
// its peer otherwise.
func (qs *quotas) callerOf(ctx context.Context, auth *Authorizer) caller {
	if id, ok := auth.identity(ctx); ok {
		return caller{key: "id:" + id, name: id, identity: true, q: qs.ident}
	}
	p := peerKey(ctx)
	return caller{key: "peer:" + p, name: p, q: qs.peer}
}

// peerKey is the quota key of the caller's address: its IP, an IPv6
// address's /64, or the address as a string when it has no IP.
func peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	var ip netip.Addr
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return a.String()
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap()
	if !ip.IsValid() {
		return p.Addr.String()
	}
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// take takes one Connect token of c's bucket; when there is none it says
// how long until there is one.
func (qs *quotas) take(c caller) (wait time.Duration, ok bool) {
	if c.q.ConnectRate <= 0 {
		return 0, true
	}
	now := qs.now()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	b := qs.buckets[c.key]
	if b == nil {
		if len(qs.buckets) >= maxBuckets && now.Sub(qs.swept) >= time.Second {
			qs.sweep(now)
			qs.swept = now
		}
		if len(qs.buckets) >= maxBuckets {
			b = &qs.overflow
		} else {
			b = &bucket{tokens: float64(c.q.ConnectBurst), last: now}
			qs.buckets[c.key] = b
		}
	}
	b.tokens = min(float64(c.q.ConnectBurst), b.tokens+now.Sub(b.last).Seconds()*c.q.ConnectRate)
	b.last = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / c.q.ConnectRate * float64(time.Second)), false
	}
	b.tokens--
	return 0, true
}

// refund gives back the token a Connect of c took, when the backend
// turned it away as Unavailable (a standby redirecting, a data path
// stopping): cheap refusals that a storm of reconnects during a failover
// must not pay for with the Connects the new leader needs.
func (qs *quotas) refund(c caller) {
	if c.q.ConnectRate <= 0 {
		return
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if b := qs.buckets[c.key]; b != nil {
		b.tokens = min(float64(c.q.ConnectBurst), b.tokens+1)
	}
}

// sweep forgets the buckets that have refilled: they are as good as new.
// Called with qs.mu held.
func (qs *quotas) sweep(now time.Time) {
	for k, b := range qs.buckets {
		q := qs.peer
		if len(k) > 3 && k[:3] == "id:" {
			q = qs.ident
		}
		if b.tokens+now.Sub(b.last).Seconds()*q.ConnectRate >= float64(q.ConnectBurst) {
			delete(qs.buckets, k)
		}
	}
}

// refuse counts a refusal for reason (one of refusalReasons) and returns
// err, the message a caller sees.
func (qs *quotas) refuse(m *Metrics, reason string, err error) error {
	for i, r := range refusalReasons {
		if r == reason {
			qs.refused[i].Add(1)
			m.refuse(i)
		}
	}
	return err
}

// sessionsError is the refusal of c's Connect at its session quota.
func (c caller) sessionsError(held int) (reason string, err error) {
	if c.identity {
		return ReasonIdentitySessions, fmt.Errorf("%w: connect: identity %q holds %d sessions, the most one identity may hold (seqd -identity-max-sessions %d); disconnect one or raise the quota",
			ErrNoCapacity, c.name, held, c.q.MaxSessions)
	}
	return ReasonPeerSessions, fmt.Errorf("%w: connect: peer %s holds %d sessions, the most one peer may hold (seqd -peer-max-sessions %d); disconnect one or raise the quota",
		ErrNoCapacity, c.name, held, c.q.MaxSessions)
}

// recvError is the refusal of c's Connect of qps QPs at its receive
// quota, when c holds held receives.
func (c caller) recvError(held, qps int) (reason string, err error) {
	if c.identity {
		return ReasonIdentityRecv, fmt.Errorf("%w: connect: identity %q holds %d receives (QPs × window over its sessions), the most one identity may hold (seqd -identity-max-recv %d): no room for %d QPs at window 1; disconnect a session or raise the quota",
			ErrNoCapacity, c.name, held, c.q.MaxRecv, qps)
	}
	return ReasonPeerRecv, fmt.Errorf("%w: connect: peer %s holds %d receives (QPs × window over its sessions), the most one peer may hold (seqd -peer-max-recv %d): no room for %d QPs at window 1; disconnect a session or raise the quota",
		ErrNoCapacity, c.name, held, c.q.MaxRecv, qps)
}

// rateError is the refusal of c's Connect at its Connect rate.
func (c caller) rateError(wait time.Duration) (reason string, err error) {
	wait = max(wait, time.Millisecond).Round(time.Millisecond)
	if c.identity {
		return ReasonIdentityRate, fmt.Errorf("%w: connect: identity %q exceeds its Connect rate of %g/s, burst %d (seqd -identity-connect-rate, -identity-connect-burst); retry in %v",
			ErrNoCapacity, c.name, c.q.ConnectRate, c.q.ConnectBurst, wait)
	}
	return ReasonPeerRate, fmt.Errorf("%w: connect: peer %s exceeds its Connect rate of %g/s, burst %d (seqd -peer-connect-rate, -peer-connect-burst); retry in %v",
		ErrNoCapacity, c.name, c.q.ConnectRate, c.q.ConnectBurst, wait)
}

// AdmissionRefusals is how many Connects were refused, by reason
// (ReasonPeerSessions, ...).
func (s *Server) AdmissionRefusals() map[string]uint64 {
	out := make(map[string]uint64, len(refusalReasons))
	for i, r := range refusalReasons {
		out[r] = s.quotas.refused[i].Load()
	}
	return out
}

// identity is the verified identity of the caller of ctx, for quotas: an
// allowed client-certificate identity, or "token:" and the first 12 hex
// digits of the SHA-256 of a listed bearer token. It counts nothing in
// a's metrics. A nil a knows no identities.
func (a *Authorizer) identity(ctx context.Context) (string, bool) {
	if a == nil {
		return "", false
	}
	for _, id := range certIdentities(ctx) {
		if a.identities[id] {
			return id, true
		}
	}
	tok, ok := bearer(ctx)
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	if !a.knows(sum) {
		return "", false
	}
	return "token:" + fingerprint(sum), true
}
