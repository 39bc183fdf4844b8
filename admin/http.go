package admin

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultMetricsAddr is where ServeMetrics listens when addr is empty.
const DefaultMetricsAddr = "127.0.0.1:9464"

// ServeMetrics serves the metrics in reg at /metrics, in the Prometheus
// exposition format, and a liveness probe at /healthz, over HTTP on addr
// (DefaultMetricsAddr when empty). It returns once the listener is open, so
// a bad address is an error here; the returned server's Addr is the bound
// address. Stop it with Shutdown or Close. A nil logger means slog.Default().
//
// WithPprof adds Go's profiler (net/http/pprof) at /debug/pprof/ on the
// same listener: off unless asked for, since a profile exposes the
// process's internals to whoever reaches the metrics port. With WithAuth
// it needs a bearer token of the Authorizer's token file; off loopback it
// needs one unless WithInsecureNoAuth: ServeMetrics refuses to start
// (ErrNoAuth) otherwise.
//
// /metrics and /healthz never need a token (scrapers and probes); off
// loopback ServeMetrics logs a warning that anyone who reaches the port
// reads them.
func ServeMetrics(addr string, reg *prometheus.Registry, logger *slog.Logger, opts ...MetricsOption) (*http.Server, error) {
	var o metricsOptions
	for _, opt := range opts {
		opt(&o)
	}
	if reg == nil {
		return nil, fmt.Errorf("admin: metrics: nil registry")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if addr == "" {
		addr = DefaultMetricsAddr
	}
	logger = logger.With("component", "admin-metrics")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(reg,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			Registry:      reg,
			ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
			ErrorHandling: promhttp.ContinueOnError,
			Timeout:       10 * time.Second,
		})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin: metrics: listen: %w", err)
	}
	loop := isLoopback(lis.Addr())
	if o.pprof {
		tokens := o.auth != nil && o.auth.hasTokens()
		if !loop && !tokens && !o.insecure {
			lis.Close()
			return nil, fmt.Errorf("%w: pprof on %s, which is not loopback, would show the process's internals to anyone who reaches it: "+
				"give it a bearer token file (seqd -admin-token-file), serve metrics on loopback, drop -pprof, or accept that with -admin-insecure-no-auth",
				ErrNoAuth, lis.Addr())
		}
		prof := func(h http.HandlerFunc) http.Handler { return h }
		if tokens {
			prof = func(h http.HandlerFunc) http.Handler { return o.auth.requireBearer(h) }
		}
		mux.Handle("/debug/pprof/", prof(pprof.Index))
		mux.Handle("/debug/pprof/cmdline", prof(pprof.Cmdline))
		mux.Handle("/debug/pprof/profile", prof(pprof.Profile))
		mux.Handle("/debug/pprof/symbol", prof(pprof.Symbol))
		mux.Handle("/debug/pprof/trace", prof(pprof.Trace))
	}
	if !loop {
		logger.Warn("metrics served off loopback without authentication: anyone who reaches this port reads seqd's counters (restrict it with a firewall or network policy)",
			"addr", lis.Addr().String(), "pprof_needs_token", o.pprof && o.auth != nil && o.auth.hasTokens())
	}
	srv := &http.Server{
		Addr:              lis.Addr().String(),
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	logger.Info("metrics serving", "addr", srv.Addr)
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server stopped", "err", err)
		}
	}()
	return srv, nil
}

// MetricsOption is an option of ServeMetrics.
type MetricsOption func(*metricsOptions)

type metricsOptions struct {
	pprof    bool
	auth     *Authorizer
	insecure bool
}

// WithPprof serves net/http/pprof at /debug/pprof/ (when on is true).
func WithPprof(on bool) MetricsOption { return func(o *metricsOptions) { o.pprof = on } }

// WithAuth makes /debug/pprof/ need an "Authorization: Bearer <token>"
// header with a token of a's token file. A nil a, or one with client
// identities only, protects nothing (HTTP here carries no client
// certificate).
func WithAuth(a *Authorizer) MetricsOption { return func(o *metricsOptions) { o.auth = a } }

// WithInsecureNoAuth lets ServeMetrics serve pprof off loopback without a
// token (when on is true).
func WithInsecureNoAuth(on bool) MetricsOption { return func(o *metricsOptions) { o.insecure = on } }

// requireBearer serves h only to requests with a listed bearer token, and
// 401 to the others.
func (a *Authorizer) requireBearer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok && tok != "" {
			if a.knows(sha256.Sum256([]byte(tok))) {
				a.allowed.Inc()
				h.ServeHTTP(w, r)
				return
			}
		}
		a.unauthn.Inc()
		a.log.Warn("pprof request refused", "path", r.URL.Path, "peer", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="seqd"`)
		http.Error(w, "this path needs an Authorization: Bearer token of seqd's -admin-token-file", http.StatusUnauthorized)
	})
}
