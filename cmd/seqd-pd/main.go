// Command seqd-pd is a PD-compatible TSO front end for seqd: applications
// written against PD's Go client (github.com/tikv/pd/client: GetTS,
// GetTSAsync, TSFuture) get seqd's timestamps by pointing the client at
// seqd-pd instead of PD.
//
//	seqd-pd [-listen 127.0.0.1:3379] [-admin 127.0.0.1:7070[,ADDR...]]
//	        [-cluster-id N] [-name NAME] [-url http://HOST:PORT]
//	        [-peers URL,...] [-timeout 10s] [-metrics 127.0.0.1:9465|off] [-log-level L] [-log-format text|json]
//	        [-tls-ca F] [-tls-cert F] [-tls-key F] [-insecure]
//
// It serves pdpb.PD's GetMembers and Tso (package pdfront) and serves
// each Tso request for count timestamps from one seqd range
// (client.GetRange: count consecutive values reserved in one round
// trip), following the HA group named by -admin (every instance's admin
// address, comma separated, as seqctl's and loadgen's -admin; -seqd is
// its deprecated old name). The group must run mode fasst (seqd -mode
// fasst, or seqctl set-mode fasst); in another mode only requests for
// one timestamp are answered. The group may have other clients and
// several seqd-pd instances in front of it.
//
// Every flag can also be set by a SEQD_PD_* variable (SEQD_PD_ADMIN for
// -admin; -h shows each); the command line wins, and an unknown SEQD_PD_
// variable is an error. -metrics serves Prometheus /metrics: the
// front end's seqd_pd_* and its seqd client's seqd_client_*. SIGHUP, or a
// change of the files, re-reads -token-file and the -tls-* files: seqd's
// next call or connection uses the new token and certificates.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/client/clientmetrics"
	"github.com/seqd/seqd/internal/envflag"
	"github.com/seqd/seqd/internal/logflag"
	"github.com/seqd/seqd/internal/reload"
	"github.com/seqd/seqd/internal/version"
	"github.com/seqd/seqd/pdfront"
	"github.com/seqd/seqd/spec"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	os.Exit(run(ctx, os.Args[1:], os.Stderr, hup, nil))
}

// environ is the environment the flags' variables come from (tests
// replace it); stdout is where -version prints.
var (
	environ           = os.Environ
	stdout  io.Writer = os.Stdout
)

// run parses args and serves until ctx ends; each receive from hup
// (SIGHUP) re-reads -token-file and the -tls-* files. ready, when not
// nil, gets the address it listens on.
func run(ctx context.Context, args []string, stderr io.Writer, hup <-chan os.Signal, ready func(addr string)) int {
	fs := flag.NewFlagSet("seqd-pd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:3379", "`address` PD clients connect to (gRPC)")
	seqd := fs.String("admin", "127.0.0.1:7070", "seqd admin `addresses`: host:port, comma separated (every instance of an HA group; IPv6 in brackets), as seqctl's and loadgen's -admin; waited for up to 30s at start")
	clusterID := fs.Uint64("cluster-id", 1, "PD cluster `ID` reported to clients (not 0)")
	name := fs.String("name", "seqd-pd", "member `name` reported to clients")
	url := fs.String("url", "", "`URL` clients reach this front end at (default http:// and the -listen address)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on one Tso request's wait for seqd (above seqd's failover time)")
	peers := fs.String("peers", "", "`URLs` of the other seqd-pd instances in front of the same seqd group, comma separated (PD clients given every instance move between them)")
	metrics := fs.String("metrics", "127.0.0.1:9465", "Prometheus /metrics listen `address`, or off")
	var sec adminclient.ClientSecurity
	sec.Register(fs)
	var lf logflag.Config
	lf.Register(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	envflag.Alias(fs, "seqd", "admin", stderr) // the old name, for one release
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: seqd-pd [flags]\n\nflags:\n")
		envflag.Usage(fs.Output(), fs, envflag.PrefixSeqdPD)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "seqd-pd: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "seqd-pd", version.Version)
		return 0
	}
	if _, err := envflag.FromEnv(fs, envflag.PrefixSeqdPD, environ()); err != nil {
		fmt.Fprintf(stderr, "seqd-pd: %v\n", err)
		return 2
	}
	if _, err := adminclient.ParseAddrs(*seqd); err != nil {
		fmt.Fprintf(stderr, "seqd-pd: -admin: %s\n", strings.TrimPrefix(err.Error(), "admin: "))
		return 2
	}
	// What can be checked before dialling seqd is checked here.
	var bad string
	switch {
	case *clusterID == 0:
		bad = "-cluster-id 0: want a nonzero PD cluster ID"
	case *timeout <= 0:
		bad = fmt.Sprintf("-timeout %v: want a positive duration", *timeout)
	}
	for _, a := range []struct{ flag, v string }{{"listen", *listen}, {"metrics", *metrics}} {
		if a.flag == "metrics" && a.v == "off" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil && bad == "" {
			bad = fmt.Sprintf("-%s %q: want host:port", a.flag, a.v)
		}
	}
	if bad != "" {
		fmt.Fprintf(stderr, "seqd-pd: %s\n", bad)
		return 2
	}
	log, err := lf.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "seqd-pd: %v\n", err)
		return 2
	}
	if err := serve(ctx, log, *listen, *seqd, *clusterID, *name, *url, *timeout, *peers, *metrics, &sec, hup, ready); err != nil {
		fmt.Fprintf(stderr, "seqd-pd: %v\n", err)
		return 1
	}
	return 0
}

// unavailableMsg is a client.ErrUnavailable's message without the kind,
// said once.
func unavailableMsg(err error) string {
	msg := strings.TrimPrefix(err.Error(), client.ErrUnavailable.Error()+": ")
	return strings.TrimPrefix(msg, adminclient.ErrUnavailable.Error()+": ")
}

// startWait bounds how long seqd-pd waits at start for seqd to answer.
var startWait = 30 * time.Second

// reloadInterval is how often the secret files are polled for changes.
var reloadInterval = reload.DefaultInterval

func serve(ctx context.Context, log *slog.Logger, listen, seqd string, clusterID uint64, name, url string,
	timeout time.Duration, peers string, metrics string, sec *adminclient.ClientSecurity, hup <-chan os.Signal, ready func(string)) error {
	dialOpts, secrets, err := sec.ReloadableDialOptions()
	if err != nil {
		return err
	}
	// The token and TLS files are re-read on SIGHUP and when they change:
	// seqd's next call or connection uses what they hold then.
	srcs := make([]reload.Source, len(secrets))
	for i, r := range secrets {
		srcs[i] = r
	}
	watch := reload.New("seqd_pd", log, srcs...)
	defer watch.Start(ctx, reloadInterval, hup)()
	eps, err := adminclient.ParseAddrs(seqd)
	if err != nil {
		return err
	}
	// seqd may be starting beside it (a script, or units started
	// together): an address that refuses is asked again for up to
	// startWait before seqd-pd gives up.
	dctx, cancel := context.WithTimeout(ctx, startWait)
	var c *client.Client
	var prev error // the last refusal: it says more than the deadline that cut the next try short
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		c, err = client.Dial(dctx, eps[0], client.WithEndpoints(eps[1:]...), client.WithAdminDialOptions(dialOpts...),
			client.WithName("seqd-pd"), client.WithLogger(log))
		if dctx.Err() != nil && err != nil && prev != nil && ctx.Err() == nil {
			err = prev
		}
		if !errors.Is(err, client.ErrUnavailable) || dctx.Err() != nil {
			break
		}
		prev = err
		if pause == 50*time.Millisecond {
			log.Info("waiting for seqd", "admin", seqd, "err", unavailableMsg(err), "for_at_most", startWait)
		}
		select {
		case <-dctx.Done():
		case <-time.After(pause):
		}
	}
	cancel()
	if errors.Is(err, client.ErrUnavailable) {
		// The kind once, and the way out.
		return fmt.Errorf("no seqd answers at -admin %s: %s (is seqd running there? Start it, or give its admin address with -admin HOST:PORT)", seqd, unavailableMsg(err))
	}
	if err != nil {
		return fmt.Errorf("-admin %s: %w", seqd, err)
	}
	defer c.Close()
	if m := c.Mode(); m != spec.ModeFaSST {
		log.Warn("seqd-pd: seqd runs a mode without ranges: Tso requests for more than one timestamp fail until it runs fasst (seqctl set-mode fasst)", "mode", m)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	if url == "" {
		url = "http://" + lis.Addr().String()
	}
	src := pdfront.NewClientSource(c)
	var peerURLs []string
	if peers != "" {
		peerURLs = strings.Split(peers, ",")
	}
	srv, err := pdfront.New(pdfront.Config{ClusterID: clusterID, Name: name, URL: url, Peers: peerURLs, Timeout: timeout, Logger: log}, src)
	if err != nil {
		lis.Close()
		return err
	}
	if metrics != "off" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			clientmetrics.New(c, nil))
		reg.MustRegister(watch.Collectors()...)
		if err := srv.Register(reg); err != nil {
			lis.Close()
			return err
		}
		mlis, err := net.Listen("tcp", metrics)
		if err != nil {
			lis.Close()
			return fmt.Errorf("-metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(mlis)
		defer hs.Close()
		log.Info("seqd-pd metrics", "listen", mlis.Addr().String())
	}
	g := grpc.NewServer()
	srv.RegisterGRPC(g)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	log.Info("seqd-pd serving", "listen", lis.Addr().String(), "url", url, "admin", seqd, "cluster-id", clusterID)
	if ready != nil {
		ready(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
		// PD clients keep their Tso streams open: give them a moment to
		// finish, then close them.
		t := time.AfterFunc(2*time.Second, g.Stop)
		g.GracefulStop()
		t.Stop()
		st := srv.Stats()
		log.Info("seqd-pd stopped", "requests", st.Requests, "timestamps", st.Timestamps, "errors", st.Errors, "refused", st.Refused)
		return nil
	case err := <-errc:
		return err
	}
}
