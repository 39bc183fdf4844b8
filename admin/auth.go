package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"

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
		"/" + ServiceName + "/SetMode",
		"/" + ServiceName + "/Advance",
		"/" + ServiceName + "/TransferLeader",
	}
	AdmissionMethods = []string{
		"/" + ServiceName + "/Connect",
		"/" + ServiceName + "/KeepAlive",
		"/" + ServiceName + "/Disconnect",
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
	// <token>" metadata.
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

// Authorizer is the unary interceptor that enforces an AuthConfig.
type Authorizer struct {
	tokens     [][sha256.Size]byte
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
	a := &Authorizer{identities: map[string]bool{}, protected: map[string]bool{}, log: c.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.log = a.log.With("component", "admin-auth")
	if c.TokenFile != "" {
		toks, err := adminclient.ReadTokens(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrAuthConfig, err)
		}
		for _, t := range toks {
			a.tokens = append(a.tokens, sha256.Sum256([]byte(t)))
		}
	}
	for _, id := range c.Identities {
		if id = strings.TrimSpace(id); id != "" {
			a.identities[id] = true
		}
	}
	if len(a.tokens) == 0 && len(a.identities) == 0 {
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

// Collectors are the authorizer's metrics.
func (a *Authorizer) Collectors() []prometheus.Collector { return []prometheus.Collector{a.denied} }

// Protected reports whether method needs authorisation.
func (a *Authorizer) Protected(method string) bool { return a.protected[method] }

// Unary is the grpc.UnaryServerInterceptor: protected methods run only
// for authorised callers; the handler never sees the others.
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if a.protected[info.FullMethod] {
		if err := a.Check(ctx); err != nil {
			a.log.Warn("admin call refused", "method", info.FullMethod, "code", status.Code(err).String(), "peer", peerAddr(ctx))
			return nil, err
		}
	}
	return handler(ctx, req)
}

// Check authorises the caller of ctx: nil for an allowed identity or a
// listed token, PermissionDenied for a verified identity that is not
// allowed, Unauthenticated otherwise.
func (a *Authorizer) Check(ctx context.Context) error {
	ids := certIdentities(ctx)
	for _, id := range ids {
		if a.identities[id] {
			a.allowed.Inc()
			return nil
		}
	}
	tok, hasTok := bearer(ctx)
	if hasTok {
		sum := sha256.Sum256([]byte(tok))
		ok := 0
		for i := range a.tokens {
			ok |= subtle.ConstantTimeCompare(sum[:], a.tokens[i][:])
		}
		if ok == 1 {
			a.allowed.Inc()
			return nil
		}
		a.unauthn.Inc()
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	if len(ids) > 0 {
		a.forbidden.Inc()
		return status.Errorf(codes.PermissionDenied, "client certificate identity %q is not allowed", ids[0])
	}
	a.unauthn.Inc()
	return status.Error(codes.Unauthenticated, "this call needs a bearer token or an allowed client certificate")
}

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
