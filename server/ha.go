package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/haserve"
	"github.com/seqd/seqd/headeronly"
	"github.com/seqd/seqd/internal/reload"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/verbs"
)

// HA and admin-security settings (flags -etcd-endpoints ... and -admin-tls-*).
type HAConfig struct {
	EtcdEndpoints string        // comma-separated etcd client URLs; empty: no HA (file store)
	EtcdPrefix    string        // key prefix, default ha.DefaultPrefix
	LeaseTTL      time.Duration // leadership lease, default 3s
	// Beat and ServeLease are the leader's heartbeat period and serving
	// lease (-ha-beat, -ha-serve-lease): a standby deposes a leader
	// whose heartbeat stopped within about ServeLease. ServeLease 0 (or
	// negative) turns them off: failover then waits for etcd to expire
	// the lease (about LeaseTTL). Zero Beat: ha.DefaultBeat.
	Beat, ServeLease time.Duration
	Advertise        string // admin address standbys redirect to; default the admin listener's
}

// beat is ha.Config.Beat: negative (off) when ServeLease is off.
func (h HAConfig) beat() time.Duration {
	if h.ServeLease <= 0 {
		return -1
	}
	return h.Beat
}

// SecurityConfig secures the admin plane.
type SecurityConfig struct {
	// Reload: each receive re-reads the token file and the TLS files
	// (cmd/seqd sends SIGHUP here). They are also re-read when they
	// change, polled every ReloadInterval (default reload.DefaultInterval).
	Reload         <-chan os.Signal
	ReloadInterval time.Duration

	TLSCert, TLSKey   string // server certificate and key: TLS on the admin plane
	ClientCA          string // verify client certificates (mTLS)
	RequireClientCert bool
	TokenFile         string // bearer tokens authorising mutating RPCs
	AllowIdentities   string // comma-separated client-certificate identities allowed
	ProtectConnect    bool   // Connect needs the same authorisation
	InsecureNoAuth    bool   // -admin-insecure-no-auth: serve admin (and pprof) off loopback without a credential
	// AtomicsTrusted: comma-separated client-certificate identities the
	// atomics mode admits on a provider that cannot refuse a client's
	// other atomics (ibv); the soft provider admits every client.
	AtomicsTrusted string
}

// atomicsTrusted lists AtomicsTrusted.
func (s SecurityConfig) atomicsTrusted() []string {
	var ids []string
	for _, id := range strings.Split(s.AtomicsTrusted, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// adminSecurity builds the admin plane's credentials and authorizer.
func (c *Config) adminSecurity(log *slog.Logger) (credentials.TransportCredentials, *admin.Authorizer, error) {
	s := c.Security
	var creds credentials.TransportCredentials
	if s.TLSCert != "" || s.TLSKey != "" || s.ClientCA != "" {
		var err error
		creds, err = admin.ServerTLS(admin.TLSConfig{CertFile: s.TLSCert, KeyFile: s.TLSKey, CAFile: s.ClientCA, RequireClientCert: s.RequireClientCert})
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if len(s.atomicsTrusted()) > 0 && s.ClientCA == "" {
		return nil, nil, fmt.Errorf("%w: -atomics-trusted needs -admin-client-ca to verify client certificates", ErrConfig)
	}
	var ids []string
	for _, id := range strings.Split(s.AllowIdentities, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	if s.TokenFile == "" && len(ids) == 0 {
		if s.ProtectConnect {
			return nil, nil, fmt.Errorf("%w: -admin-protect-connect needs -admin-token-file or -admin-allow", ErrConfig)
		}
		log.Warn("admin plane: no -admin-token-file or -admin-allow: mutating RPCs are open to anyone who reaches the admin port")
		return creds, nil, nil
	}
	if len(ids) > 0 && s.ClientCA == "" {
		return nil, nil, fmt.Errorf("%w: -admin-allow needs -admin-client-ca to verify client certificates", ErrConfig)
	}
	auth, err := admin.NewAuthorizer(admin.AuthConfig{TokenFile: s.TokenFile, Identities: ids, ProtectConnect: s.ProtectConnect, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return creds, auth, nil
}

// runHA serves as one instance of an HA group on etcd: the data path runs
// only while this instance leads (see package haserve).
// adminConfig is the admin server's configuration, the same for a
// single seqd and an HA instance but for the modes it offers.
func (c *Config) adminConfig(log *slog.Logger, creds credentials.TransportCredentials, auth *admin.Authorizer, modes []string) admin.Config {
	peer, ident := c.quotas()
	return admin.Config{Addr: c.Admin, Logger: log, Modes: modes, MaxWindow: max(c.MaxWindow, headeronly.DefaultMaxWindow),
		Creds: creds, Auth: auth, SessionLease: max(c.SessionLease, 0), PeerQuota: peer, IdentityQuota: ident,
		InsecureNoAuth: c.Security.InsecureNoAuth, MaxConnects: c.AdminMaxConnects, MaxHandshakes: c.AdminMaxHandshakes,
		Format: c.format, AdvanceBudget: c.advanceBudget, AdvanceWindow: c.AdvanceWindow, AdvanceRate: c.AdvanceRate}
}

func runHA(ctx context.Context, c Config, log *slog.Logger, ready func(Addrs), creds credentials.TransportCredentials, auth *admin.Authorizer, watch *reload.Watcher) error {
	lis, err := net.Listen("tcp", c.Admin)
	if err != nil {
		return fmt.Errorf("seqd: admin listener: %w", err)
	}
	adv := c.HA.Advertise
	if adv == "" {
		adv = lis.Addr().String()
	}
	node, err := ha.New(ha.Config{Endpoints: strings.Split(c.HA.EtcdEndpoints, ","), Prefix: c.HA.EtcdPrefix,
		Advertise: adv, TTL: c.HA.LeaseTTL, Logger: log, Init: c.Init, Advance: c.Advance,
		Beat: c.HA.beat(), ServeLease: max(c.HA.ServeLease, 0),
		// The witness: the highest group mark this instance has seen,
		// which a restored etcd snapshot cannot take back.
		DataDir: c.Data})
	if err != nil {
		lis.Close()
		if errors.Is(err, ha.ErrWitness) {
			return fmt.Errorf("seqd: -data %s: %w", c.Data, err)
		}
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	defer node.Close()
	dev, err := verbs.Open(c.Provider, c.Device, c.popts)
	if err != nil {
		lis.Close()
		return fmt.Errorf("seqd: open %s device %q: %w", c.Provider, c.Device, err)
	}
	defer dev.Close()
	srv, err := haserve.New(haserve.Config{Node: node, Mode: c.Mode, Logger: log,
		Oracle: oracle.Config{Format: c.format},
		Modes: modes.Config{Device: dev, Workers: c.Workers, RespQPs: c.RespQPs, Cores: c.cores,
			MaxWindow: c.MaxWindow, MaxClients: c.MaxClients, Version: c.Version, AtomicsTrusted: c.Security.atomicsTrusted(),
			MaxSessionRecv: c.MaxSessionRecv, SharedRecv: c.sharedRecv}})
	if err != nil {
		lis.Close()
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	cols := append([]prometheus.Collector{srv.Collector()}, watch.Collectors()...)
	if auth != nil {
		cols = append(cols, auth.Collectors()...)
	}
	reg, am, err := c.registry(srv, cols...)
	if err != nil {
		lis.Close()
		return err
	}
	// Every registered mode is a well-formed name; haserve refuses the
	// ones an HA group cannot run (atomics) and says why.
	acfg := c.adminConfig(log, creds, auth, modes.All)
	acfg.Metrics = am
	adm, err := admin.New(acfg, srv)
	if err != nil {
		lis.Close()
		return fmt.Errorf("seqd: admin: %w", err)
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
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan struct{})
	var runErr error
	go func() { defer close(runDone); runErr = srv.Run(runCtx) }()
	log.Info("seqd serving (HA)", "etcd", c.HA.EtcdEndpoints, "advertise", adv, "ttl", node.Config().TTL,
		"beat", node.Config().Beat, "serve_lease", node.Config().ServeLease, "takeover_after", node.Config().TakeoverAfter(),
		"mode", c.Mode, "data", addrs.Data, "admin", addrs.Admin, "metrics", addrs.Metrics)
	if ready != nil {
		ready(addrs)
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			cancel()
			<-runDone
			return fmt.Errorf("seqd: admin server: %w", err)
		}
	case <-runDone:
		// The group refuses to serve (ha.ErrNoMark, ha.ErrMarkBehind): stop, as a single
		// seqd does without its mark file.
		if runErr != nil && ctx.Err() == nil {
			adm.Stop()
			return fmt.Errorf("seqd: %w", runErr)
		}
	}
	log.Info("seqd shutting down: stepping down first")
	cancel()
	<-runDone // the term ends, the data path stops, the lease is revoked
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	adm.Shutdown(sctx)
	return nil
}
