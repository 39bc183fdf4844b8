// Package server wires a seqd server from a Config: the oracle, the verbs
// device, the data-path mode, the admin gRPC server and the metrics
// endpoint. cmd/seqd parses flags into a Config and calls Run; tests call
// Run in-process.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/headeronly"
	"github.com/seqd/seqd/internal/respq"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// DefaultMaxClients is -max-clients' default: the most concurrent
// client sessions (see headeronly.DefaultMaxClients for the memory).
const DefaultMaxClients = headeronly.DefaultMaxClients

// The values of -spec-s0-recv, spec-s0's request queue layout
// (headeronly.Config.SharedRecv): a request QP per client QP, or one per
// worker shared by its client QPs.
const (
	RecvPerSession = headeronly.RecvPerSession
	RecvShared     = headeronly.RecvShared
)

// The default admission quotas (-peer-max-sessions, -peer-connect-rate,
// -peer-connect-burst and the -identity-* flags). A host runs many
// clients and a token may stand for a fleet, so they are generous; they
// bound one caller's share, and with MaxSessionRecv its receives, so that
// it cannot lock every other client out. docs/operations.md ("Admission
// quotas") says how to size them.
var (
	DefaultPeerQuota     = admin.Quota{MaxSessions: 1024, ConnectRate: 100, ConnectBurst: 1000}
	DefaultIdentityQuota = admin.Quota{MaxSessions: 4096, ConnectRate: 1000, ConnectBurst: 4000}
)

// DefaultRecvShare: by default (-peer-max-recv, -identity-max-recv) one
// peer, and one identity, may hold at most 1/DefaultRecvShare of the
// receives of all workers (DefaultMaxRecv): a flooder without a token
// and one with a token together hold half, and every other caller
// shares the rest.
const DefaultRecvShare = 4

// DefaultMaxRecv is the receive quota -peer-max-recv and
// -identity-max-recv default to on workers workers: a DefaultRecvShare
// of their receive budget, spec-s0's (headeronly.DefaultMaxRecv each).
func DefaultMaxRecv(workers int) int {
	return max(1, workers) * headeronly.DefaultMaxRecv / DefaultRecvShare
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("seqd: invalid config")

// Config is everything seqd's flags set. Zero fields get the defaults
// below in Validate, the one place that knows them.
type Config struct {
	Provider     string // verbs provider, default "soft"
	Device       string // device, default "127.0.0.1:4791"
	ProviderOpts string // "k=v,k=v"
	Data         string // data directory for the persisted mark, default "./seqd-data"
	Admin        string // admin gRPC address, default "127.0.0.1:7070"
	Metrics      string // metrics HTTP address, default "127.0.0.1:9464"; "off" disables
	Workers      int    // default 1
	RespQPs      int    // default 3
	Cores        string // comma-separated core per worker, -1 or "none" for unpinned
	Format       string // "hybrid" (default) or "counter"
	Mode         string // a registered mode (modes.All, from spec.ModeTable), default spec.ModeSpecS0; switchable at run time (SetMode)
	MaxWindow    int    // default 256
	MaxClients   int    // default DefaultMaxClients
	// SessionLease: a client session not renewed (KeepAlive) within it
	// is disconnected. Default admin.DefaultSessionLease; negative: none.
	SessionLease time.Duration
	// Admission quotas (admin.Quota), see DefaultPeerQuota and
	// DefaultIdentityQuota: the most sessions and the Connect rate (a
	// second, and at once) of one peer that did not authenticate (its
	// source IP; IPv6 by /64) and of one authenticated identity. Zero:
	// the default; negative: no limit.
	PeerMaxSessions, IdentityMaxSessions   int
	PeerConnectRate, IdentityConnectRate   float64
	PeerConnectBurst, IdentityConnectBurst int
	// PeerMaxRecv and IdentityMaxRecv bound the receives (QPs × window,
	// over all its sessions) one peer and one identity may hold. Zero:
	// DefaultMaxRecv(Workers); negative: no limit.
	PeerMaxRecv, IdentityMaxRecv int
	// MaxSessionRecv caps one session's QPs × window: a session asking
	// for more gets a smaller window. Zero: a quarter of a worker's
	// receive budget (8192 in spec-s0); negative: no cap.
	MaxSessionRecv int
	Version        string
	HA             HAConfig       // -etcd-endpoints etc.: run as one instance of an HA group
	Security       SecurityConfig // admin plane TLS and authorisation
	// Init marks a new deployment (-init): a missing Data directory is
	// created and a missing mark file taken as a fresh start. The zero
	// value refuses both, with an error naming the path and the recovery:
	// a missing mark is as likely a lost or unmounted volume. A mark file
	// that exists is loaded whatever Init says.
	Init bool
	// Pprof serves Go's profiler at /debug/pprof/ on the metrics listener
	// (-pprof; off by default).
	Pprof bool
	// Advance (-advance VALUE) makes every value served greater than
	// VALUE, and lets seqd start without a mark file: the recovery after
	// losing it. VALUE must be above every value ever served.
	Advance uint64
	// AdvanceBudget (-advance-budget) bounds the sum of all Advance steps
	// in one AdvanceWindow: a duration for hybrid ("24h"), a count of
	// values for counter. Empty: admin.DefaultAdvanceBudget.
	AdvanceBudget string
	// AdvanceWindow (-advance-budget-window) is the budget's period;
	// zero: admin.DefaultAdvanceWindow. AdvanceRate (-advance-rate) is
	// how many Advance calls a minute seqd takes; zero:
	// admin.DefaultAdvanceRate.
	AdvanceWindow time.Duration
	AdvanceRate   int
	// AdminMaxConnects (-admin-max-connects) and AdminMaxHandshakes
	// (-admin-max-handshakes) are the admin plane's admission control
	// (admin.Config.MaxConnects, MaxHandshakes): the Connects handled
	// and the TLS handshakes run at once. Zero: the default; negative:
	// no bound.
	AdminMaxConnects   int
	AdminMaxHandshakes int
	// SpecS0Recv (-spec-s0-recv) is spec-s0's request queue layout:
	// RecvPerSession (default) or RecvShared.
	SpecS0Recv string

	cores  []int
	format spec.Format
	popts  verbs.Options

	advanceBudget uint64 // AdvanceBudget in values
	sharedRecv    bool   // SpecS0Recv
}

// Validate fills defaults and checks c.
func (c *Config) Validate() error {
	def := func(p *string, d string) {
		if *p == "" {
			*p = d
		}
	}
	def(&c.Provider, "soft")
	def(&c.Device, "127.0.0.1:4791")
	def(&c.Data, "./seqd-data")
	def(&c.Admin, admin.DefaultAddr)
	def(&c.Metrics, admin.DefaultMetricsAddr)
	def(&c.Format, "hybrid")
	def(&c.Mode, spec.ModeSpecS0)
	var err error
	if c.popts, err = verbs.ParseOptions(c.ProviderOpts); err != nil {
		return fmt.Errorf("%w: -provider-opts: %v", ErrConfig, err)
	}
	if c.format, err = spec.ParseFormat(c.Format); err != nil {
		return fmt.Errorf("%w: -format: %v", ErrConfig, err)
	}
	def(&c.SpecS0Recv, RecvPerSession)
	if c.sharedRecv, err = headeronly.ParseRecv(c.SpecS0Recv); err != nil {
		return fmt.Errorf("%w: -spec-s0-recv %q: want %s or %s", ErrConfig, c.SpecS0Recv, RecvPerSession, RecvShared)
	}
	if !slices.Contains(modes.All, c.Mode) {
		return fmt.Errorf("%w: -mode %q (have %s)", ErrConfig, c.Mode, strings.Join(modes.All, ", "))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"workers", c.Workers}, {"resp-qps", c.RespQPs}, {"max-window", c.MaxWindow}, {"max-clients", c.MaxClients}} {
		if f.v < 0 {
			return fmt.Errorf("%w: -%s %d is negative", ErrConfig, f.name, f.v)
		}
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	// Bounds the data path would refuse later, said here in flag terms.
	switch {
	case c.MaxWindow > spec.MaxWindow:
		return fmt.Errorf("%w: -max-window %d is above the protocol's %d", ErrConfig, c.MaxWindow, spec.MaxWindow)
	case c.RespQPs > respq.MaxQPs:
		return fmt.Errorf("%w: -resp-qps %d: at most %d response QPs per worker", ErrConfig, c.RespQPs, respq.MaxQPs)
	}
	if err := c.fillQuotas(); err != nil {
		return err
	}
	if c.MaxClients == 0 {
		c.MaxClients = DefaultMaxClients
	}
	switch {
	case c.SessionLease == 0:
		c.SessionLease = admin.DefaultSessionLease
	case c.SessionLease > 0 && c.SessionLease < 100*time.Millisecond:
		return fmt.Errorf("%w: -session-lease %v is below 100ms", ErrConfig, c.SessionLease)
	}
	c.cores = nil
	if c.Cores != "" && c.Cores != "none" {
		for _, s := range strings.Split(c.Cores, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < -1 {
				return fmt.Errorf("%w: -cores %q: %q is not a core number or -1", ErrConfig, c.Cores, s)
			}
			c.cores = append(c.cores, n)
		}
		if len(c.cores) > c.Workers {
			return fmt.Errorf("%w: -cores lists %d cores for %d workers", ErrConfig, len(c.cores), c.Workers)
		}
	}
	for _, a := range []struct{ name, v string }{{"admin", c.Admin}, {"metrics", c.Metrics}} {
		if a.name == "metrics" && a.v == "off" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%w: -%s %q: %v", ErrConfig, a.name, a.v, err)
		}
	}
	if c.advanceBudget, err = parseAdvanceBudget(c.AdvanceBudget, c.format); err != nil {
		return fmt.Errorf("%w: -advance-budget %q: %v", ErrConfig, c.AdvanceBudget, err)
	}
	if c.AdvanceWindow < 0 || c.AdvanceRate < 0 {
		return fmt.Errorf("%w: -advance-budget-window %v and -advance-rate %d must not be negative", ErrConfig, c.AdvanceWindow, c.AdvanceRate)
	}
	if err := c.checkAuth(); err != nil {
		return err
	}
	if st, err := os.Stat(c.Data); err == nil && !st.IsDir() {
		return fmt.Errorf("%w: -data %q is not a directory", ErrConfig, c.Data)
	}
	return nil
}

// fillQuotas fills the admission quotas' defaults and checks them.
func (c *Config) fillQuotas() error {
	for _, f := range []struct {
		name string
		p    *int
		d    int
	}{
		{"peer-max-sessions", &c.PeerMaxSessions, DefaultPeerQuota.MaxSessions},
		{"peer-connect-burst", &c.PeerConnectBurst, DefaultPeerQuota.ConnectBurst},
		{"identity-max-sessions", &c.IdentityMaxSessions, DefaultIdentityQuota.MaxSessions},
		{"identity-connect-burst", &c.IdentityConnectBurst, DefaultIdentityQuota.ConnectBurst},
		{"peer-max-recv", &c.PeerMaxRecv, DefaultMaxRecv(c.Workers)},
		{"identity-max-recv", &c.IdentityMaxRecv, DefaultMaxRecv(c.Workers)},
	} {
		if *f.p == 0 {
			*f.p = f.d
		}
	}
	for _, f := range []struct {
		name string
		p    *float64
		d    float64
	}{
		{"peer-connect-rate", &c.PeerConnectRate, DefaultPeerQuota.ConnectRate},
		{"identity-connect-rate", &c.IdentityConnectRate, DefaultIdentityQuota.ConnectRate},
	} {
		if *f.p != *f.p || *f.p > 1e9 {
			return fmt.Errorf("%w: -%s %v: want a rate a second (negative: no limit)", ErrConfig, f.name, *f.p)
		}
		if *f.p == 0 {
			*f.p = f.d
		}
	}
	return nil
}

// quotas are the admin server's admission quotas.
func (c *Config) quotas() (peer, ident admin.Quota) {
	return admin.Quota{MaxSessions: c.PeerMaxSessions, ConnectRate: c.PeerConnectRate, ConnectBurst: c.PeerConnectBurst, MaxRecv: c.PeerMaxRecv},
		admin.Quota{MaxSessions: c.IdentityMaxSessions, ConnectRate: c.IdentityConnectRate, ConnectBurst: c.IdentityConnectBurst, MaxRecv: c.IdentityMaxRecv}
}

// Addrs are where a running seqd listens.
type Addrs struct {
	Data    string // the device
	Admin   string
	Metrics string
}

// Run starts seqd and serves until ctx is done, then shuts down cleanly.
// ready, if not nil, is called once every listener is up.
func Run(ctx context.Context, c Config, log *slog.Logger, ready func(Addrs)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	creds, auth, err := c.adminSecurity(log)
	if err != nil {
		return err
	}
	watch := secretWatcher(log, creds, auth)
	defer watch.Start(ctx, c.Security.ReloadInterval, c.Security.Reload)()
	if c.HA.EtcdEndpoints != "" {
		return runHA(ctx, c, log, ready, creds, auth, watch)
	}
	orc, err := oracle.Open(ctx, oracle.Config{Format: c.format, Dir: c.Data, Init: c.Init, Floor: c.Advance, Logger: log})
	if err != nil {
		return fmt.Errorf("seqd: oracle in %s: %w%s", c.Data, err, recovery(err))
	}
	defer orc.Close()
	if err := c.keptMode(log); err != nil {
		return err
	}
	dev, err := verbs.Open(c.Provider, c.Device, c.popts)
	if err != nil {
		return fmt.Errorf("seqd: open %s device %q: %w", c.Provider, c.Device, err)
	}
	defer dev.Close()
	dp, err := modes.New(ctx, modes.Config{Device: dev, Oracle: orc, Workers: c.Workers, RespQPs: c.RespQPs,
		Cores: c.cores, MaxWindow: c.MaxWindow, MaxClients: c.MaxClients, Version: c.Version, Logger: log,
		QKey: modes.RandomQKey(), AtomicsTrusted: c.Security.atomicsTrusted(), MaxSessionRecv: c.MaxSessionRecv,
		SharedRecv: c.sharedRecv}, c.Mode)
	if err != nil {
		return fmt.Errorf("seqd: start %s: %w", c.Mode, err)
	}
	defer dp.Close()

	backend := oracleStatus{Switch: dp, o: orc, dir: c.Data, known: modes.All}
	cols := append([]prometheus.Collector{dp.Collector()}, orc.Collectors()...)
	cols = append(cols, watch.Collectors()...)
	if auth != nil {
		cols = append(cols, auth.Collectors()...)
	}
	reg, am, err := c.registry(backend, cols...)
	if err != nil {
		return err
	}
	acfg := c.adminConfig(log, creds, auth, modes.All)
	acfg.Metrics = am
	adm, err := admin.New(acfg, backend)
	if err != nil {
		return fmt.Errorf("seqd: admin: %w", err)
	}
	lis, err := net.Listen("tcp", c.Admin)
	if err != nil {
		return fmt.Errorf("seqd: admin listener: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- adm.Serve(lis) }()
	addrs := Addrs{Data: dev.Name(), Admin: lis.Addr().String(), Metrics: "off"}
	if c.Metrics != "off" {
		ms, err := admin.ServeMetrics(c.Metrics, reg, log, admin.WithPprof(c.Pprof), admin.WithAuth(auth), admin.WithInsecureNoAuth(c.Security.InsecureNoAuth))
		if err != nil {
			adm.Stop()
			return fmt.Errorf("seqd: metrics listener: %w", err)
		}
		defer ms.Close()
		addrs.Metrics = ms.Addr
	}
	log.Info("seqd serving", "mode", c.Mode, "format", c.Format, "data", addrs.Data,
		"admin", addrs.Admin, "metrics", addrs.Metrics, "data_dir", c.Data)
	if ready != nil {
		ready(addrs)
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			return fmt.Errorf("seqd: admin server: %w", err)
		}
	}
	log.Info("seqd shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	adm.Shutdown(sctx)
	return nil
}

// keptMode makes c.Mode the mode kept in the data directory (SetMode's),
// or keeps -mode there when none is.
func (c *Config) keptMode(log *slog.Logger) error {
	m, ok, err := loadMode(c.Data, modes.All)
	if err != nil {
		return err
	}
	if !ok {
		return saveMode(c.Data, c.Mode)
	}
	if m != c.Mode {
		log.Info("seqd: starting in the mode kept in the data directory (the last SetMode), not -mode",
			"mode", m, "flag", c.Mode, "file", filepath.Join(c.Data, ModeFileName))
		c.Mode = m
	}
	return nil
}

// recovery is what seqd's operator does about an oracle that will not open
// on its data directory, in seqd's flags (docs/operations.md, "Backup and
// recovery of the mark").
func recovery(err error) string {
	switch {
	case errors.Is(err, oracle.ErrDataDir), errors.Is(err, oracle.ErrNoMark):
		return ". Recovery: mount the volume or restore " + oracle.MarkFileName + " from a backup; " +
			"after losing it, start with -advance VALUE above every value ever served; " +
			"for a new deployment only, start once with -init"
	case errors.Is(err, oracle.ErrCorrupt):
		return ". Recovery: restore " + oracle.MarkFileName + " from a backup, or move it aside and " +
			"start with -advance VALUE above every value ever served"
	}
	return ""
}

// oracleStatus completes a data path's Status with the oracle's view: the
// value handed out last, the persisted mark, clock steps and stalls.
type oracleStatus struct {
	*modes.Switch // also promotes Replace (admin.Replacer)
	o             *oracle.Oracle
	dir           string   // data directory: SetMode keeps the mode there
	known         []string // modes a mode file may name
}

var _ admin.Replacer = oracleStatus{}

func (b oracleStatus) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	st, err := b.Switch.Status(ctx)
	if err != nil {
		return nil, err
	}
	os := b.o.Stats()
	st.Current = max(st.Current, os.Current)
	st.PersistedMark = os.Mark
	st.ClockStepsBack = os.ClockStepsBack
	st.PersistStalls = max(st.PersistStalls, os.Stalls)
	return st, nil
}
