// Command seqd is the sequencer server. With no flags it serves Spec-S0
// on loopback with the soft verbs provider: data plane UDP
// 127.0.0.1:4791, admin gRPC 127.0.0.1:7070, metrics HTTP
// 127.0.0.1:9464, persisted mark in ./seqd-data.
//
// -config FILE reads the same flags, one name=value per line (# starts a
// comment), and every flag can be set by an environment variable, SEQD_
// and its name in upper case with _ for - (SEQD_ETCD_ENDPOINTS for
// -etcd-endpoints; -h shows each): the command line wins over the
// variables, which win over the file. An unknown SEQD_ variable is an
// error, as an unknown key in the file is (package envflag). -log-level and -log-format choose the log; -pprof serves
// Go's profiler on the metrics listener. SIGINT and SIGTERM stop seqd;
// SIGHUP re-reads -admin-token-file and the -admin-tls-* files (as a
// change of those files does).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seqd/seqd/internal/envflag"
	"github.com/seqd/seqd/internal/logflag"
	"github.com/seqd/seqd/internal/version"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	_ "github.com/seqd/seqd/verbs/ibv"
	_ "github.com/seqd/seqd/verbs/soft"
	_ "github.com/seqd/seqd/verbs/soft/xdp" // -provider-opts xdp=DEV
)

// envPrefix names the variables that set flags: SEQD_ETCD_ENDPOINTS sets
// -etcd-endpoints.
const envPrefix = envflag.PrefixSeqd

// stdout is where -version prints; tests replace it.
var stdout io.Writer = os.Stdout

// onServing, when set (tests), is called once seqd serves, with its
// addresses and a function that stops it as SIGTERM would.
var onServing func(a server.Addrs, stop func())

func main() {
	os.Exit(realMain(os.Args[1:], os.Stderr))
}

func realMain(args []string, stderr io.Writer) int {
	return realMainEnv(args, stderr, os.Environ())
}

// realMainEnv is realMain with the environment (KEY=value, as
// os.Environ; tests pass their own).
func realMainEnv(args []string, stderr io.Writer, environ []string) int {
	var c server.Config
	var lf logflag.Config
	// A worker's receive budget (spec-s0's), for the help texts.
	recvBudget := server.DefaultMaxRecv(1) * server.DefaultRecvShare
	fs := flag.NewFlagSet("seqd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgFile := fs.String("config", "", "read flags from `FILE`, one name=value per line")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&c.Provider, "provider", "soft", "verbs provider (soft, ibv)")
	fs.StringVar(&c.Device, "device", "127.0.0.1:4791", "verbs device (soft: IP:port)")
	fs.StringVar(&c.ProviderOpts, "provider-opts", "", "provider options k=v,k=v (soft: queues, advertise, loss, dup, reorder, seed, gso, gro, rcvbuf, sndbuf, tos, nicwire, max_qp; see docs/operations.md)")
	fs.StringVar(&c.Data, "data", "./seqd-data", "data directory for the persisted mark")
	fs.BoolVar(&c.Init, "init", false, "new deployment: create the data directory and start without a mark file if none exists (never overrides an existing mark); without it a missing directory or mark file stops seqd. With -etcd-endpoints: a new group, started without a mark in etcd")
	fs.Uint64Var(&c.Advance, "advance", 0, "serve only values above `VALUE`, and start without a mark file (with -etcd-endpoints: without a mark in etcd): the recovery after losing it (VALUE above every value ever served)")
	fs.StringVar(&c.Admin, "admin", "127.0.0.1:7070", "admin gRPC listen address")
	fs.StringVar(&c.Metrics, "metrics", "127.0.0.1:9464", "metrics HTTP listen address, or off")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the metrics listener")
	lf.Register(fs)
	fs.IntVar(&c.Workers, "workers", 1, "data-path workers")
	fs.IntVar(&c.RespQPs, "resp-qps", 3, "response QPs per worker")
	fs.StringVar(&c.Cores, "cores", "none", "core per worker, comma-separated (-1 or none: unpinned)")
	fs.StringVar(&c.Format, "format", "hybrid", "value format: hybrid or counter")
	fs.StringVar(&c.SpecS0Recv, "spec-s0-recv", server.RecvPerSession, "spec-s0's request queues: "+server.RecvPerSession+" (a request QP per client QP, holding exactly its window of receives: a client sending beyond its window uses up only its own) or "+server.RecvShared+" (one request QP per worker, receives shared by its clients, as in FaSST; see docs/performance.md)")
	fs.StringVar(&c.Mode, "mode", "spec-s0", "data-path mode (switch at run time with seqctl set-mode):"+spec.ModeHelp())
	fs.IntVar(&c.MaxWindow, "max-window", 256, "largest window granted per client QP")
	fs.IntVar(&c.MaxClients, "max-clients", server.DefaultMaxClients, fmt.Sprintf("most concurrent client sessions (spec-s0: about 2.3 KB of server heap per one-QP client, as measured with 10,000 clients in e2e; each worker also bounds the sum of its clients' windows at %d)", recvBudget))
	fs.DurationVar(&c.SessionLease, "session-lease", 30*time.Second, "a client session not renewed within this lease (the client library renews every third of it) is disconnected; negative: no leases")
	fs.IntVar(&c.AdminMaxConnects, "admin-max-connects", 0, "Connects the admin plane handles at once; a few more wait up to 250 ms, the rest are refused with a retry-after, which clients honour (0: 32; negative: no bound)")
	fs.IntVar(&c.AdminMaxHandshakes, "admin-max-handshakes", 0, "TLS handshakes the admin plane runs at once; more wait up to 1s for a slot (0: 4; negative: no bound)")
	fs.IntVar(&c.MaxSessionRecv, "max-session-recv", 0, "most receives (QPs × window) one session may hold; a session asking for more gets a smaller window (0: a quarter of a worker's receive budget; negative: no cap)")
	fs.IntVar(&c.PeerMaxSessions, "peer-max-sessions", server.DefaultPeerQuota.MaxSessions, "most sessions one unauthenticated peer (source IP; IPv6 by /64) may hold (negative: no limit)")
	fs.Float64Var(&c.PeerConnectRate, "peer-connect-rate", server.DefaultPeerQuota.ConnectRate, "Connects a second one unauthenticated peer may make (negative: no limit)")
	fs.IntVar(&c.PeerConnectBurst, "peer-connect-burst", server.DefaultPeerQuota.ConnectBurst, "Connects one unauthenticated peer may make at once")
	fs.IntVar(&c.PeerMaxRecv, "peer-max-recv", 0, fmt.Sprintf("most receives (QPs × window, over all its sessions) one unauthenticated peer may hold; a Connect beyond gets a smaller window, or is refused (0: a share of all workers' receive budget, workers × %d / %d; negative: no limit)", recvBudget, server.DefaultRecvShare))
	fs.IntVar(&c.IdentityMaxSessions, "identity-max-sessions", server.DefaultIdentityQuota.MaxSessions, "most sessions one authenticated identity (bearer token or client certificate) may hold (negative: no limit)")
	fs.Float64Var(&c.IdentityConnectRate, "identity-connect-rate", server.DefaultIdentityQuota.ConnectRate, "Connects a second one authenticated identity may make (negative: no limit)")
	fs.IntVar(&c.IdentityMaxRecv, "identity-max-recv", 0, "most receives (QPs × window, over all its sessions) one authenticated identity may hold (0: as -peer-max-recv; negative: no limit)")
	fs.IntVar(&c.IdentityConnectBurst, "identity-connect-burst", server.DefaultIdentityQuota.ConnectBurst, "Connects one authenticated identity may make at once")
	fs.StringVar(&c.HA.EtcdEndpoints, "etcd-endpoints", "", "etcd client URLs, comma-separated: run as one instance of an HA group (the mark lives in etcd, not -data)")
	fs.StringVar(&c.HA.EtcdPrefix, "etcd-prefix", "/seqd", "etcd key prefix of the HA group")
	fs.DurationVar(&c.HA.LeaseTTL, "lease-ttl", 3*time.Second, "leadership lease TTL (whole seconds); without -ha-serve-lease failover takes about this long")
	fs.DurationVar(&c.HA.Beat, "ha-beat", 100*time.Millisecond, "HA: how often the leader renews its serving lease in etcd")
	fs.DurationVar(&c.HA.ServeLease, "ha-serve-lease", 400*time.Millisecond, "HA: how long the leader serves after an answered heartbeat; standbys depose a leader silent for a little longer (0: off, failover waits for -lease-ttl)")
	fs.StringVar(&c.HA.Advertise, "advertise", "", "admin address standbys redirect clients to (default: the admin listener's)")
	fs.StringVar(&c.Security.TLSCert, "admin-tls-cert", "", "admin plane TLS certificate (PEM)")
	fs.StringVar(&c.Security.TLSKey, "admin-tls-key", "", "admin plane TLS key (PEM)")
	fs.StringVar(&c.Security.ClientCA, "admin-client-ca", "", "CA (PEM) that verifies admin client certificates (mTLS)")
	fs.BoolVar(&c.Security.RequireClientCert, "admin-require-client-cert", false, "refuse admin TLS connections without a verified client certificate")
	fs.StringVar(&c.Security.TokenFile, "admin-token-file", "", "file of bearer tokens (one a line, mode 0600) that authorise mutating admin RPCs")
	fs.StringVar(&c.Security.AllowIdentities, "admin-allow", "", "client-certificate identities (CN or SAN), comma-separated, that authorise mutating admin RPCs")
	fs.BoolVar(&c.Security.ProtectConnect, "admin-protect-connect", false, "Connect, KeepAlive and Disconnect (data-plane admission, session leases) need the same authorisation")
	fs.StringVar(&c.Security.AtomicsTrusted, "atomics-trusted", "", "client-certificate identities (CN or SAN), comma-separated, that the atomics mode admits on a provider that cannot refuse other atomics than fetch-and-add of one (ibv: a NIC lets any client move the counter); the soft provider enforces that and admits everyone")
	fs.BoolVar(&c.Security.InsecureNoAuth, "admin-insecure-no-auth", false, "serve the admin plane (and -pprof) off loopback without -admin-token-file or -admin-allow: anyone who reaches it may advance the counter (seqd refuses to start so otherwise)")
	fs.StringVar(&c.AdvanceBudget, "advance-budget", "", "most that all Advance calls (seqctl advance) may move the counter in one -advance-budget-window: a duration for -format hybrid, a count for counter (default 24h, or that many values)")
	fs.DurationVar(&c.AdvanceWindow, "advance-budget-window", 24*time.Hour, "the period after which -advance-budget is whole again")
	fs.IntVar(&c.AdvanceRate, "advance-rate", 10, "most Advance calls a minute (a bucket refilled evenly); more are refused")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: seqd [flags]\n\nflags:\n")
		envflag.Usage(fs.Output(), fs, envPrefix)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "seqd: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "seqd", version.Version)
		return 0
	}
	// The command line wins over SEQD_* variables, which win over the
	// -config file.
	set, err := envflag.FromEnv(fs, envPrefix, environ)
	if err != nil {
		fmt.Fprintf(stderr, "seqd: %v\n", err)
		return 2
	}
	if *cfgFile != "" {
		if err := loadConfig(fs, *cfgFile, set); err != nil {
			fmt.Fprintf(stderr, "seqd: %v\n", err)
			return 2
		}
	}
	log, err := lf.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "seqd: %v\n", err)
		return 2
	}
	c.Version = version.Version
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "seqd: %s\n", describe(err))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGHUP re-reads the admin token file and TLS files; it does not
	// stop seqd.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	c.Security.Reload = hup
	var ready func(server.Addrs)
	if onServing != nil {
		ready = func(a server.Addrs) { onServing(a, stop) }
	}
	if err := server.Run(ctx, c, log, ready); err != nil {
		fmt.Fprintf(stderr, "seqd: %s\n", describe(err))
		return 1
	}
	return 0
}

// describe renders err in seqd's words: the package prefixes its layers
// each add once ("seqd: oracle in DIR: oracle: loading mark: oracle: ...")
// dropped, as main adds "seqd: ", and the oracle package's Config fields
// and the listeners named by the flags that set them.
func describe(err error) string {
	msg := err.Error()
	for _, p := range []string{"seqd: ", "oracle: "} {
		msg = strings.TrimPrefix(msg, p)
		msg = strings.ReplaceAll(msg, ": "+p, ": ")
	}
	return strings.NewReplacer("Config.Floor", "-advance", "Config.Init", "-init",
		"admin listener: admin: listen: ", "-admin: ", "admin listener: ", "-admin: ", "metrics listener: admin: metrics: listen: ", "-metrics: ").Replace(msg)
}

// loadConfig applies name=value lines of path to fs, skipping flags set on
// the command line.
func loadConfig(fs *flag.FlagSet, path string, set map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("-config: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "-"))
		if !ok || k == "" {
			return fmt.Errorf("%s:%d: want name=value, got %q", path, n, line)
		}
		if k == "config" || fs.Lookup(k) == nil {
			return fmt.Errorf("%s:%d: unknown flag %q", path, n, k)
		}
		if set[k] {
			continue
		}
		if err := fs.Set(k, strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("%s:%d: %s: %v", path, n, k, err)
		}
	}
	return sc.Err()
}
