package client

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

type options struct {
	provider    string
	byRoute     bool // no WithDevice: soft on the route's local address
	device      string
	provOpts    verbs.Options
	qps         int
	window      int
	timeout     time.Duration
	retransmit  time.Duration
	rfpReads    int // WithRFPReads (rfp.go); 0: spec.RFPDefaultReads
	name        string
	logger      *slog.Logger
	endpoints   []string
	dialOpts    []grpc.DialOption
	coalesce    int // WithCoalescing: ranged requests in flight; 0 off
	coalesceSet bool
	cc          bool    // WithCongestionControl
	linkRate    float64 // WithLinkRate, bits/s; 0: spec.TimelyLinkRate
}

// DefaultTimeout is the deadline of a call whose context has none. It
// outlasts an HA failover with the default 3s lease (measured ~3.2s from
// a leader's kill -9 to the new leader serving) with room to spare.
const DefaultTimeout = 10 * time.Second

// Option configures Dial.
type Option func(*options) error

// WithDevice chooses the client's own verbs device: a provider, a device
// name and provider options ("k=v,k=v"). Without it, or with provider
// "soft" and device "", the client uses the soft provider on "IP:0", IP
// being the local address the kernel would send from to reach the
// server (127.0.0.1 for a server on loopback).
func WithDevice(provider, device, providerOpts string) Option {
	return func(o *options) error {
		po, err := verbs.ParseOptions(providerOpts)
		if err != nil {
			return err
		}
		o.provider, o.device, o.provOpts = provider, device, po
		return nil
	}
}

// WithQPs sets the number of queue pairs (default 1).
func WithQPs(n int) Option { return func(o *options) error { o.qps = n; return nil } }

// WithWindow sets the outstanding requests wanted per QP (default 64).
func WithWindow(w int) Option { return func(o *options) error { o.window = w; return nil } }

// WithTimeout is the deadline of a call whose context has none (default
// DefaultTimeout): the call then fails with ErrTimeout when no answer
// came within d. A context's own deadline always wins, earlier or later.
func WithTimeout(d time.Duration) Option { return func(o *options) error { o.timeout = d; return nil } }

// WithRetransmit sets how long to wait for an answer before resending
// under a fresh tag (default spec.DefaultTimeout). In Spec-S0 a request
// whose answers come back after it was resent waits twice as long from
// its next copy on, up to spec.MaxBackoff times d (spec.Window); a lost
// one is resent after d.
func WithRetransmit(d time.Duration) Option {
	return func(o *options) error { o.retransmit = d; return nil }
}

// WithName names the client in the server's logs.
func WithName(n string) Option { return func(o *options) error { o.name = n; return nil } }

// WithEndpoints adds admin addresses of the other instances of an HA
// group. When the server the client uses stops answering, the client
// looks for the leader there (after the address a standby redirects to).
// Dial also accepts several comma-separated addresses.
func WithEndpoints(addrs ...string) Option {
	return func(o *options) error {
		for _, a := range addrs {
			if a = strings.TrimSpace(a); a == "" {
				return fmt.Errorf("empty admin address")
			}
			o.endpoints = append(o.endpoints, a)
		}
		return nil
	}
}

// WithAdminDialOptions passes options to every dial of an admin server:
// TLS (grpc.WithTransportCredentials with adminclient.ClientTLS) or a bearer
// token (grpc.WithPerRPCCredentials with adminclient.BearerToken).
func WithAdminDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dialOpts = append(o.dialOpts, opts...); return nil }
}

// WithInsecure chooses a plaintext admin plane knowingly, also to admin
// addresses off loopback (the admin plane otherwise needs TLS there, see
// WithAdminDialOptions). A bearer token passed with
// adminclient.BearerToken(token, true) then travels in the clear. The data
// path is not encrypted either way.
func WithInsecure() Option {
	return func(o *options) error { o.dialOpts = append(o.dialOpts, adminclient.Insecure()); return nil }
}

// DefaultCoalescing is how many coalesced ranged requests a client keeps
// in flight without WithCoalescing.
const DefaultCoalescing = 1

// WithCoalescing sets how calls are coalesced in modes that serve ranges
// (fasst): while n ranged requests are in flight (default
// DefaultCoalescing), further GetTimestamp and Submit callers wait, and
// go out together as one request for as many values as they are (at
// most MaxRange), each given its own value of the answer's range, in
// arrival order. A caller that finds fewer than n in flight goes out at
// once, with no wait. n = 0 turns coalescing off: every call is a request
// of its own, for one value (fasst's transport then puts no two callers
// in one request either). Modes without ranges never coalesce.
func WithCoalescing(n int) Option {
	return func(o *options) error { o.coalesce, o.coalesceSet = n, true; return nil }
}

// WithCongestionControl turns the eRPC mode's congestion control on or
// off (the default): Timely on each session's RTTs and a Carousel rate
// limiter for congested sessions (thesis §6.4.2). Other modes have none
// and ignore it. It is off by default: Timely's thresholds are eRPC's,
// set for hardware NICs, scaled by each session's lowest RTT, and over a
// kernel UDP path the scheduler's delays still reach them often enough
// that Timely throttles sessions no network congests (docs/performance.md,
// "No false congestion").
func WithCongestionControl(on bool) Option {
	return func(o *options) error { o.cc = on; return nil }
}

// WithLinkRate tells the eRPC mode's congestion control the line rate of
// this host's link, in bits per second: a session starts at it and never
// exceeds it, and on a slow link Timely's additive step (eRPC's 5 Mbit/s)
// and its floor (eRPC's 15 Mbit/s) are each at most a thousandth of it
// (spec.NewTimely), so that an incast's sessions can share it. The default is 100 Gbit/s. Behind a slower bottleneck,
// give its rate.
func WithLinkRate(bitsPerSecond float64) Option {
	return func(o *options) error {
		if !(bitsPerSecond > 0) || math.IsInf(bitsPerSecond, 0) {
			return fmt.Errorf("client: WithLinkRate(%g): want a rate above 0 bits/s", bitsPerSecond)
		}
		o.linkRate = bitsPerSecond
		return nil
	}
}

// WithLogger sets the logger the client logs to (connects, failovers,
// warnings). Without it (or with nil) the client logs nothing: a library
// does not write to the process's default logger uninvited.
func WithLogger(l *slog.Logger) Option { return func(o *options) error { o.logger = l; return nil } }

// discard is the logger of a client given none: it drops every record
// without formatting it.
var discard = slog.New(slog.DiscardHandler)

func (o *options) validate() error {
	if o.provider == "" || (o.provider == "soft" && o.device == "") {
		o.provider, o.byRoute = "soft", true // device: by route, in dial
	}
	if o.qps == 0 {
		o.qps = 1
	}
	if o.window == 0 {
		o.window = 64
	}
	if o.timeout == 0 {
		o.timeout = DefaultTimeout
	}
	if o.retransmit == 0 {
		o.retransmit = spec.DefaultTimeout
	}
	if o.logger == nil {
		o.logger = discard
	}
	if !o.coalesceSet {
		o.coalesce = DefaultCoalescing
	}
	switch {
	case o.coalesce < 0 || o.coalesce > 64:
		return fmt.Errorf("%w: coalescing %d (0..64 ranged requests in flight)", ErrConfig, o.coalesce)
	case o.qps < 1 || o.qps > 64:
		return fmt.Errorf("%w: %d QPs (1..64)", ErrConfig, o.qps)
	case o.window < 1 || o.window > spec.MaxWindow:
		return fmt.Errorf("%w: window %d (1..%d)", ErrConfig, o.window, spec.MaxWindow)
	case o.timeout < 0 || o.retransmit < 0:
		return fmt.Errorf("%w: negative timeout", ErrConfig)
	}
	return nil
}
