package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/spec"
)

// Defaults filled in by Config.validate.
const (
	DefaultAddr            = adminclient.DefaultAddr
	DefaultMaxRecvMsgSize  = 64 << 10
	DefaultMaxQPsPerClient = 16
	DefaultMaxWindow       = 1024
	// DefaultMaxAdvance bounds one Advance: a day of hybrid time
	// (milliseconds << 18), in counter format that many values.
	DefaultMaxAdvance = uint64(24*time.Hour/time.Millisecond) << 18
	// DefaultAdvanceBudget bounds all Advances together within one
	// AdvanceWindow: a day of hybrid time, like one Advance.
	DefaultAdvanceBudget = DefaultMaxAdvance
	// DefaultAdvanceWindow is the period after which the Advance budget
	// is whole again.
	DefaultAdvanceWindow = 24 * time.Hour
	// DefaultAdvanceRate is how many Advance calls a minute the server
	// takes (a bucket of that many, refilled evenly over the minute).
	DefaultAdvanceRate = 10
)

// MaxClientNameLen is the longest client_name a ConnectRequest may carry, in
// bytes. The name only labels logs and status, so it is kept short.
const MaxClientNameLen = 128

// Config configures a Server. The zero value is usable: validate fills every
// unset field with its default.
type Config struct {
	// Addr is the TCP address ListenAndServe listens on.
	// Default DefaultAddr (loopback only).
	Addr string
	// MaxRecvMsgSize is the largest request the server accepts, in bytes.
	// Larger requests are refused with ResourceExhausted before they reach
	// any handler. Default DefaultMaxRecvMsgSize (64 KiB).
	MaxRecvMsgSize int
	// MaxQPsPerClient is the most queue pairs one ConnectRequest may
	// register. Default DefaultMaxQPsPerClient.
	MaxQPsPerClient int
	// MaxWindow is the largest window a ConnectRequest may ask for.
	// Default DefaultMaxWindow, which fits every mode (Spec-S0 allows up
	// to spec.MaxWindow).
	MaxWindow int
	// MaxAdvance is the largest step one Advance may move the counter
	// above its current value (like PD's reset-ts bound). Default
	// DefaultMaxAdvance.
	MaxAdvance uint64
	// AdvanceBudget bounds the sum of the steps of every Advance within
	// one AdvanceWindow, in values (hybrid: milliseconds << 18). An
	// Advance that would go over it is refused with ResourceExhausted,
	// in human units (see Format). Default DefaultAdvanceBudget.
	AdvanceBudget uint64
	// AdvanceWindow is the budget's period: the budget is whole again
	// AdvanceWindow after the window's first Advance. Default
	// DefaultAdvanceWindow.
	AdvanceWindow time.Duration
	// AdvanceRate is how many Advance calls a minute the server takes,
	// refused or not (a bucket of AdvanceRate, refilled evenly); more are
	// refused with ResourceExhausted. Default DefaultAdvanceRate.
	AdvanceRate int
	// Format is the oracle's value format, for refusals in human units:
	// durations for hybrid, counts for counter. Zero means hybrid.
	Format spec.Format
	// InsecureNoAuth lets the server listen off loopback without Auth, so
	// that anyone who reaches it may call the mutating RPCs (Advance,
	// SetMode, TransferLeader). Without it, New and Serve refuse a
	// non-loopback address when Auth is nil.
	InsecureNoAuth bool
	// SessionLease, when positive, is the lease every session gets: it
	// is disconnected unless renewed (KeepAlive) or ended (Disconnect)
	// within it, so that dead clients are reclaimed. Zero: no leases.
	SessionLease time.Duration
	// PeerQuota bounds the sessions, their receives (QPs × window) and
	// the Connect rate of one peer (source IP; IPv6 by /64) that did not
	// authenticate; IdentityQuota those of one authenticated identity (an
	// allowed client-certificate identity or a bearer token of Auth),
	// which counts against its identity instead of its peer. A Connect
	// beyond them is refused with ResourceExhausted, saying which quota
	// (one beyond the receives first gets a smaller window). Zero: no
	// limit (seqd sets its own defaults: -peer-max-sessions, -peer-max-recv
	// and the flags beside them).
	PeerQuota, IdentityQuota Quota
	// MaxConnects bounds the Connects handled at once; more wait for a
	// slot briefly (at most 250 ms, a few per slot), then are refused
	// with Unavailable and a retry-after (a RetryInfo detail, see
	// adminclient.RetryAfter), which the client library honours. Default
	// DefaultMaxConnects; negative: no bound. See admission.go.
	MaxConnects int
	// MaxHandshakes bounds the TLS handshakes (Creds) computing at once
	// (one waiting for its client holds no slot); more wait for a slot,
	// at most HandshakeWait, then their connection is closed. Default
	// DefaultMaxHandshakes, DefaultHandshakeWait; negative
	// MaxHandshakes: no bound.
	MaxHandshakes int
	HandshakeWait time.Duration
	// Modes are the mode names a ConnectRequest may name (spec.Modes); a
	// name outside them is a malformed request. Whether the server runs the
	// requested mode is for the backend to decide (ErrFailedPrecondition).
	// An empty mode in a request is always accepted. Default spec.Modes.
	Modes []string
	// Creds are the server's transport credentials. Nil serves plaintext,
	// which is only safe on loopback; the server logs a warning otherwise.
	// TLS slots in here.
	Creds credentials.TransportCredentials
	// Auth, when set, authorises the mutating RPCs (and, if configured,
	// Connect) before any handler runs; see NewAuthorizer.
	Auth *Authorizer
	// Metrics, when set, counts every Admin request by method and code.
	// See NewMetrics.
	Metrics *Metrics
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	now func() time.Time // the clock of the Advance budget; tests set it
}

// orDefault sets *v to def when it is zero, and refuses a negative *v
// (named name in the error).
func orDefault[T int | int64 | time.Duration](v *T, def T, name string) error {
	if *v == 0 {
		*v = def
	}
	if *v < 0 {
		return fmt.Errorf("admin: config: %s %v is negative", name, *v)
	}
	return nil
}

// validate checks cfg and returns a copy with every default filled in. It is
// the only place that knows the defaults.
func (cfg Config) validate() (Config, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if err := orDefault(&cfg.MaxRecvMsgSize, DefaultMaxRecvMsgSize, "MaxRecvMsgSize"); err != nil {
		return cfg, err
	}
	if err := orDefault(&cfg.MaxQPsPerClient, DefaultMaxQPsPerClient, "MaxQPsPerClient"); err != nil {
		return cfg, err
	}
	if err := orDefault(&cfg.MaxWindow, DefaultMaxWindow, "MaxWindow"); err != nil {
		return cfg, err
	}
	if cfg.MaxAdvance == 0 {
		cfg.MaxAdvance = DefaultMaxAdvance
	}
	if cfg.MaxConnects == 0 {
		cfg.MaxConnects = DefaultMaxConnects
	}
	if cfg.MaxHandshakes == 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if err := orDefault(&cfg.HandshakeWait, DefaultHandshakeWait, "HandshakeWait"); err != nil {
		return cfg, err
	}
	var err error
	if cfg.PeerQuota, err = cfg.PeerQuota.validate("PeerQuota"); err != nil {
		return cfg, err
	}
	if cfg.IdentityQuota, err = cfg.IdentityQuota.validate("IdentityQuota"); err != nil {
		return cfg, err
	}
	if cfg.AdvanceBudget == 0 {
		cfg.AdvanceBudget = DefaultAdvanceBudget
	}
	if err := orDefault(&cfg.AdvanceWindow, DefaultAdvanceWindow, "AdvanceWindow"); err != nil {
		return cfg, err
	}
	if err := orDefault(&cfg.AdvanceRate, DefaultAdvanceRate, "AdvanceRate"); err != nil {
		return cfg, err
	}
	if cfg.Format == 0 {
		cfg.Format = spec.FormatHybrid
	}
	if !cfg.Format.Valid() {
		return cfg, fmt.Errorf("admin: config: Format %d", cfg.Format)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.Auth == nil && !cfg.InsecureNoAuth && !IsLoopbackAddr(cfg.Addr) {
		return cfg, fmt.Errorf("%w: %s", ErrNoAuth, noAuthAdvice(cfg.Addr))
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = append([]string(nil), spec.Modes...)
	} else {
		cfg.Modes = append([]string(nil), cfg.Modes...) // the caller keeps its slice
	}
	for i, m := range cfg.Modes {
		if m == "" {
			return cfg, fmt.Errorf("admin: config: Modes[%d] is empty", i)
		}
		for _, prev := range cfg.Modes[:i] {
			if prev == m {
				return cfg, fmt.Errorf("admin: config: mode %q listed twice", m)
			}
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// ErrNoAuth reports an admin plane that would listen off loopback with no
// credential: anyone who reached it could move the counter.
var ErrNoAuth = errors.New("admin: a non-loopback admin address needs authorisation")

func noAuthAdvice(addr string) string {
	return fmt.Sprintf("%s is not a loopback address and no Auth is set, so anyone who reaches it could call Advance, SetMode and TransferLeader; "+
		"set Auth (bearer tokens or client-certificate identities), listen on loopback, or set InsecureNoAuth to accept that", addr)
}

// IsLoopbackAddr reports whether the host of addr ("host:port") is a
// loopback address or "localhost". An empty host, a wildcard (0.0.0.0,
// ::) or any other name is not: it may be reached from elsewhere.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
