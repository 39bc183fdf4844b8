package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
)

// Full method names of the Admin RPCs that change the server's state. They
// always need authorisation when an Authorizer is installed. Connect,
// KeepAlive and Disconnect (admission: one rule for the three) need it
// when AuthConfig.ProtectConnect is set. Status and health never do.
var (
	MutatingMethods = []string{
		"/" + adminclient.ServiceName + "/SetMode",
		"/" + adminclient.ServiceName + "/Advance",
		"/" + adminclient.ServiceName + "/TransferLeader",
	}
	AdmissionMethods = []string{
		"/" + adminclient.ServiceName + "/Connect",
		"/" + adminclient.ServiceName + "/KeepAlive",
		"/" + adminclient.ServiceName + "/Disconnect",
	}
)

// ErrAuthConfig reports an unusable AuthConfig.
var ErrAuthConfig = errors.New("admin: auth config")

// AuthConfig says who may call the protected RPCs: a client whose verified
// TLS client certificate carries an allowed identity, or one that presents
// a bearer token listed in TokenFile. With neither set nobody may.
type AuthConfig struct {
	// TokenFile lists bearer tokens, one a line; blank lines and lines
	// starting with # are ignored. Clients send "authorization: Bearer
	// <token>" metadata. Reload re-reads it (seqd: on SIGHUP and when
	// the file changes).
	TokenFile string
	// Identities are the allowed client-certificate identities: the
	// subject common name, or a DNS, URI or e-mail SAN. Only certificates
	// verified against the server's client CA count.
	Identities []string
	// ProtectConnect makes Connect, KeepAlive and Disconnect require
	// authorisation too, so only authorised clients reach the data plane
	// or touch a session's lease.
	ProtectConnect bool
	// Logger receives denials (default slog.Default()).
	Logger *slog.Logger
}

// Authorizer is the unary interceptor that enforces an AuthConfig. Its
// tokens can be replaced while it runs (Reload).
type Authorizer struct {
	tokenFile  string
	tokens     atomic.Pointer[[][sha256.Size]byte] // nil or empty without a token file
	identities map[string]bool
	protected  map[string]bool
	log        *slog.Logger
	denied     *prometheus.CounterVec
	unauthn    prometheus.Counter
	forbidden  prometheus.Counter
	allowed    prometheus.Counter
}

// NewAuthorizer loads the token file and returns the interceptor.
func NewAuthorizer(c AuthConfig) (*Authorizer, error) {
	a := &Authorizer{tokenFile: c.TokenFile, identities: map[string]bool{}, protected: map[string]bool{}, log: c.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.log = a.log.With("component", "admin-auth")
	if c.TokenFile != "" {
		if err := a.Reload(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrAuthConfig, err)
		}
	}
	for _, id := range c.Identities {
		if id = strings.TrimSpace(id); id != "" {
			a.identities[id] = true
		}
	}
	if c.TokenFile == "" && len(a.identities) == 0 {
		return nil, fmt.Errorf("%w: no token file and no client identities: nobody could call the protected RPCs", ErrAuthConfig)
	}
	for _, m := range MutatingMethods {
		a.protected[m] = true
	}
	if c.ProtectConnect {
		for _, m := range AdmissionMethods {
			a.protected[m] = true
		}
	}
	a.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seqd_admin_auth_total",
		Help: "Authorisation decisions on protected admin RPCs, by result: allowed, unauthenticated, permission_denied.",
	}, []string{"type"})
	a.allowed = a.denied.WithLabelValues("allowed")
	a.unauthn = a.denied.WithLabelValues("unauthenticated")
	a.forbidden = a.denied.WithLabelValues("permission_denied")
	return a, nil
}

// Reload re-reads the token file: the tokens it lists now are the only
// ones accepted, from the next call on. When the file cannot be read or
// lists no token, Reload returns the error and the tokens in force stay
// (a bad file never locks operators out, nor lets anyone in).
func (a *Authorizer) Reload() error {
	if a.tokenFile == "" {
		return nil
	}
	toks, err := adminclient.ReadTokens(a.tokenFile)
	if err != nil {
		return err
	}
	sums := make([][sha256.Size]byte, len(toks))
	for i, t := range toks {
		sums[i] = sha256.Sum256([]byte(t))
	}
	a.tokens.Store(&sums)
	return nil
}

// Name names the Authorizer's secret for reload logs and metrics.
func (a *Authorizer) Name() string { return "tokens" }

// Files is the token file, if any: what Reload reads.
func (a *Authorizer) Files() []string {
	if a.tokenFile == "" {
		return nil
	}
	return []string{a.tokenFile}
}

// Collectors are the authorizer's metrics.
func (a *Authorizer) Collectors() []prometheus.Collector { return []prometheus.Collector{a.denied} }

// Protected reports whether method needs authorisation.
func (a *Authorizer) Protected(method string) bool { return a.protected[method] }

// Unary is the grpc.UnaryServerInterceptor: protected methods run only
// for authorised callers; the handler never sees the others. A refused
// call is logged here, with its peer and the identity it presented; an
// allowed one carries its identity in the context (Identity) to the
// audit log.
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if a.protected[info.FullMethod] {
		id, err := a.identify(ctx)
		if err != nil {
			a.log.Warn("admin call refused", "method", info.FullMethod, "code", status.Code(err).String(),
				"peer", peerAddr(ctx), "identity", id)
			return nil, err
		}
		ctx = context.WithValue(ctx, identityKey{}, id)
	}
	return handler(ctx, req)
}

// Check authorises the caller of ctx: nil for an allowed identity or a
// listed token, PermissionDenied for a verified identity that is not
// allowed, Unauthenticated otherwise.
func (a *Authorizer) Check(ctx context.Context) error {
	_, err := a.identify(ctx)
	return err
}

// identify is Check that also names the caller: "cert:" and the allowed
// certificate identity, or "token:" and the token's fingerprint
// (TokenFingerprint). A refused caller is named by what it presented
// ("anonymous" for nothing).
// knows reports, in constant time over the tokens in force, whether sum
// is the SHA-256 of one of them.
func (a *Authorizer) knows(sum [sha256.Size]byte) bool {
	ok := 0
	if p := a.tokens.Load(); p != nil {
		for i := range *p {
			ok |= subtle.ConstantTimeCompare(sum[:], (*p)[i][:])
		}
	}
	return ok == 1
}

// hasTokens reports whether a token file with at least one token is in
// force.
func (a *Authorizer) hasTokens() bool {
	p := a.tokens.Load()
	return p != nil && len(*p) > 0
}

func (a *Authorizer) identify(ctx context.Context) (string, error) {
	ids := certIdentities(ctx)
	for _, id := range ids {
		if a.identities[id] {
			a.allowed.Inc()
			return "cert:" + id, nil
		}
	}
	tok, hasTok := bearer(ctx)
	if hasTok {
		sum := sha256.Sum256([]byte(tok))
		id := "token:" + fingerprint(sum)
		if a.knows(sum) {
			a.allowed.Inc()
			return id, nil
		}
		a.unauthn.Inc()
		return id, status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	if len(ids) > 0 {
		a.forbidden.Inc()
		return "cert:" + ids[0], status.Errorf(codes.PermissionDenied, "client certificate identity %q is not allowed", ids[0])
	}
	a.unauthn.Inc()
	return "anonymous", status.Error(codes.Unauthenticated, "this call needs a bearer token or an allowed client certificate")
}

// identityKey keys the authorised caller's identity in a call's context.
type identityKey struct{}

// Identity returns the identity the Authorizer allowed for the call of
// ctx ("cert:CN", "token:FINGERPRINT"), and false when no Authorizer
// checked the call.
func Identity(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(identityKey{}).(string)
	return id, ok
}

// TokenFingerprint names a bearer token in logs without revealing it: the
// first 12 hex digits of its SHA-256 (printf %s TOKEN | sha256sum | cut -c1-12).
func TokenFingerprint(token string) string { return fingerprint(sha256.Sum256([]byte(token))) }

func fingerprint(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:6]) }

// bearer returns the bearer token of the call's metadata.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok && t != "" {
			return t, true
		}
	}
	return "", false
}

// CallerIdentities returns the caller's verified identities: its client
// certificate's, as certIdentities reads them, whether or not the call
// needed authorisation. A data path that trusts some clients more than
// others (atomics on a NIC) admits by them. A bearer token names no
// identity.
func CallerIdentities(ctx context.Context) []string { return certIdentities(ctx) }

// certIdentities returns the identities of the caller's verified client
// certificate: CN, DNS, URI and e-mail SANs. An unverified certificate has
// none.
func certIdentities(ctx context.Context) []string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := ti.State.VerifiedChains[0][0]
	var ids []string
	if leaf.Subject.CommonName != "" {
		ids = append(ids, leaf.Subject.CommonName)
	}
	ids = append(ids, leaf.DNSNames...)
	for _, u := range leaf.URIs {
		ids = append(ids, u.String())
	}
	return append(ids, leaf.EmailAddresses...)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
