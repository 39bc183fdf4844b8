package server

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seqd/seqd/admin"
)

// registry returns the metrics registry of a seqd process: cols (the
// data path's, the oracle's, the authorizer's), the Go runtime's and the
// process's own, seqd_build_info, and the admin plane's request counter
// and sessions gauge (read from backend at scrape time), whose Metrics it
// returns for admin.Config.
func (c *Config) registry(backend admin.Backend, cols ...prometheus.Collector) (*prometheus.Registry, *admin.Metrics, error) {
	reg := prometheus.NewRegistry()
	cols = append(cols, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(c.Version))
	for _, col := range cols {
		if err := reg.Register(col); err != nil {
			return nil, nil, fmt.Errorf("seqd: metrics: %w", err)
		}
	}
	am, err := admin.NewMetrics(reg, admin.BackendSessions(backend, time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("seqd: metrics: %w", err)
	}
	return reg, am, nil
}

// buildInfo is seqd_build_info: 1, labelled with the version stamped at
// build time, the Go version and the VCS revision (when the build
// recorded one).
func buildInfo(version string) prometheus.Collector {
	if version == "" {
		version = "unknown"
	}
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "seqd_build_info",
		Help:        "seqd's build: always 1, labelled with the version, the Go version and the VCS revision.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version(), "revision": rev}})
	g.Set(1)
	return g
}
