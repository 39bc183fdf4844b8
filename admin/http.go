package admin

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
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
// process's internals to whoever reaches the metrics port.
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
	if o.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin: metrics: listen: %w", err)
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

type metricsOptions struct{ pprof bool }

// WithPprof serves net/http/pprof at /debug/pprof/ (when on is true).
func WithPprof(on bool) MetricsOption { return func(o *metricsOptions) { o.pprof = on } }
