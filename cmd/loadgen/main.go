// Command loadgen drives seqd with closed-loop load, compares its modes,
// verifies every timestamp it received, and reports a table, JSON and a
// plot. See README.md, "Comparing modes: loadgen". Every flag can be set
// by a LOADGEN_ variable (LOADGEN_ADMIN for -admin; -h shows each); an
// unknown LOADGEN_ variable is an error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/internal/envflag"
	"github.com/seqd/seqd/internal/logflag"
	"github.com/seqd/seqd/internal/version"
	"github.com/seqd/seqd/loadgen"
	"github.com/seqd/seqd/spec"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes: 0 clean, 1 run failed, 2 bad flags, 3 violations found or
// a mode skipped.
func realMain(args []string, stdout, stderr io.Writer) int {
	return realMainEnv(args, stdout, stderr, os.Environ())
}

// fail prints err once prefixed with loadgen: (the package's errors
// carry the prefix already).
func fail(w io.Writer, err error) {
	fmt.Fprintf(w, "loadgen: %s\n", strings.TrimPrefix(err.Error(), "loadgen: "))
}

// where names a file written for a person: its absolute path.
func where(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// realMainEnv is realMain with the environment (KEY=value, as os.Environ).
func realMainEnv(args []string, stdout, stderr io.Writer, environ []string) int {
	var c loadgen.Config // no InProcess: -spawn starts a seqd binary, and loadgen links no server
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Admin, "admin", "127.0.0.1:7070", "admin address of a running seqd")
	fs.BoolVar(&c.Spawn, "spawn", false, "start seqd for the run (-seqd-binary, else the seqd binary next to loadgen, else on PATH)")
	fs.StringVar(&c.SeqdBinary, "seqd-binary", "", "with -spawn: the seqd binary (default: seqd next to loadgen, else on PATH)")
	fs.StringVar(&c.SeqdCores, "seqd-cores", "", "with -spawn: seqd's -cores (its workers' cores)")
	fs.StringVar(&c.Provider, "provider", "soft", "the clients' verbs provider")
	fs.StringVar(&c.Device, "device", "", "the clients' verbs device, e.g. 198.51.100.2:0 for soft (default: the local address of the route to -admin's host, then to seqd's data plane)")
	var sec adminclient.ClientSecurity
	sec.Register(fs)
	fs.StringVar(&c.ProviderOpts, "provider-opts", "", "verbs provider options for the clients and a spawned seqd, e.g. loss=0.01,dup=0.01,reorder=0.01 (fault injection)")
	modes := fs.String("modes", "spec-s0", "modes to compare, in order, comma-separated (may repeat): "+spec.ModeList(spec.Modes))
	fs.IntVar(&c.Clients, "clients", 1, "client threads, each with its own client and engine")
	fs.IntVar(&c.QPs, "queue-pairs", 0, "queue pairs per client; 0: per mode (Spec-S0 one per 16 outstanding requests, at least 4, as a QP's tag space allows about 500k requests/s; other modes 4)")
	fs.IntVar(&c.Window, "window", 64, "outstanding requests per client")
	sweepW := fs.String("sweep-window", "", "windows to sweep, e.g. 1,4,16,64 (replaces -window)")
	sweepC := fs.String("sweep-clients", "", "client counts to sweep, e.g. 1,2,4 (replaces -clients)")
	coalesce := fs.String("coalesce", "", "in modes that serve ranges ("+spec.ModeList(spec.RangeModes())+"): coalesce each client's concurrent calls into ranged requests: on, off, or how many ranged requests in flight per client; a list (on,off) runs every point once per setting, to compare them in one run (default: the client's, on)")
	fs.BoolVar(&c.CongestionControl, "erpc-cc", false, "in mode erpc: congestion control in the clients, Timely on each session's RTTs and a Carousel rate limiter for congested sessions (thesis §6.4.2); run once with and once without to compare")
	fs.Float64Var(&c.LinkMbps, "erpc-link-rate", 0, "in mode erpc with -erpc-cc: the line rate of the clients' link in Mbit/s (client.WithLinkRate), which each session starts at and never exceeds; Timely's step and floor are each at most a thousandth of it, so that many sessions can share it; behind a slower bottleneck, its rate; 0: 100 Gbit/s")
	fs.DurationVar(&c.Duration, "duration", 5e9, "measured interval per mode and point")
	fs.DurationVar(&c.Warmup, "warmup", 1e9, "warm-up before each measurement")
	fs.DurationVar(&c.Echo, "echo", 1e9, "how long to measure each echo floor (negative: skip)")
	cores := fs.String("cores", "", "pin loadgen's threads to these cores, comma-separated")
	fs.BoolVar(&c.Verify, "verify", true, "check every timestamp received (uniqueness, per-client order, real-time order)")
	fs.IntVar(&c.VerifyMax, "verify-max", 200<<20, "most calls kept for verification per point (24 bytes each)")
	fs.StringVar(&c.Engine, "engine", "client", "load engine: client (the client library) or wire (the lean wire-level generator, in "+spec.ModeList(spec.WireModes())+", with the floors and Redis INCR measured in the same run; other modes run through the client library at -clients × -window)")
	flows := fs.String("flows", "1,64,1024", "with -engine wire: flow counts (emulated client QPs) to run")
	fs.IntVar(&c.FlowWindow, "flow-window", 0, "with -engine wire: window per flow (0: -inflight/flows, 1..256)")
	fs.IntVar(&c.InFlight, "inflight", 256, "with -engine wire: requests outstanding over all flows at most (flows take turns): more only queue in the server's socket, where one waiting past 4 ms is dropped")
	fs.DurationVar(&c.FlowTimeout, "flow-timeout", 0, "with -engine wire: a request unanswered this long is given up and counted as lost (0: 8ms, the protocol's bound on an answer's delay: no answer comes later)")
	fs.IntVar(&c.ServerCore, "server-core", -1, "with -engine wire: core of the server under test (a spawned seqd's threads, the floor servers, redis-server); -1 unpinned")
	fs.IntVar(&c.ServerPID, "server-pid", 0, "with -engine wire and a seqd not spawned: its pid, for its CPU time per request")
	fs.BoolVar(&c.NoFloors, "no-floors", false, "with -engine wire: skip the echo floors")
	fs.StringVar(&c.WireSource, "wire-source", "", "with -engine wire: flow 0's source address, flow i's is it +i (default 127.77.0.1, on loopback; another host's generator needs addresses local to it and routed back to it)")
	fs.IntVar(&c.WireSources, "wire-sources", 0, "with -engine wire: source addresses the flows share, as client hosts share their sessions (0: one per flow); flows that share a source, server and server QP send in one GSO message, as a client process's QPs do")
	fs.IntVar(&c.Slices, "slices", 1, "with -engine wire: measure each server at a flow count in this many slices of -duration/slices (after -warmup/slices), taken in turn with the other servers', so that a slow phase of a shared machine weighs on all of them")
	fs.BoolVar(&c.NoRedis, "no-redis", false, "with -engine wire: skip the Redis INCR reference")
	floor := fs.String(loadgen.FloorFlag, "", "internal: serve as a floor server (provider-echo or raw-echo) until stdin closes")
	floorDepth := fs.Int("floor-depth", 8192, "internal: receives the floor server posts")
	jsonPath := fs.String("json-file", "", "write the results as JSON to `FILE`")
	plotPath := fs.String("plot", "", "draw the results to `FILE` (.png or .svg)")
	quiet := fs.Bool("quiet", false, "no progress line, and only errors logged on stderr")
	cpuProf := fs.String("cpuprofile", "", "write loadgen's CPU profile to `FILE`")
	var lf logflag.Config
	lf.Register(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	// Old names, for one release.
	envflag.Alias(fs, "seqd", "seqd-binary", stderr)
	envflag.Alias(fs, "qps", "queue-pairs", stderr)
	envflag.Alias(fs, "json", "json-file", stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: loadgen [flags]\n\nflags:\n")
		envflag.Usage(fs.Output(), fs, envflag.PrefixLoadgen)
		fmt.Fprint(fs.Output(), loadgen.Columns())
		fmt.Fprint(fs.Output(), "\nthe plot (-plot) labels each point of a sweep clients×window: client threads × requests outstanding per client\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadgen: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "loadgen", version.Version)
		return 0
	}
	if _, err := envflag.FromEnv(fs, envflag.PrefixLoadgen, environ); err != nil {
		fail(stderr, err)
		return 2
	}
	if *floor != "" {
		stop := make(chan struct{})
		go func() {
			io.Copy(io.Discard, os.Stdin)
			close(stop)
		}()
		if err := loadgen.ServeFloor(*floor, c.ServerCore, *floorDepth, c.ProviderOpts, stdout, stop); err != nil {
			fail(stderr, err)
			return 1
		}
		return 0
	}
	var err error
	c.Modes = loadgen.ParseList(*modes)
	if c.SweepWindow, err = loadgen.ParseInts(*sweepW); err == nil {
		if c.SweepClients, err = loadgen.ParseInts(*sweepC); err == nil {
			if c.Cores, err = loadgen.ParseInts(*cores); err == nil {
				if c.Flows, err = loadgen.ParseInts(*flows); err == nil {
					c.Coalesce, err = loadgen.ParseCoalesce(*coalesce)
				}
			}
		}
	}
	for _, m := range c.Modes {
		if _, ok := spec.Facts(m); !ok && err == nil {
			// Config accepts any name (a server may register more modes
			// than this build knows); the command line wants one of ours.
			err = fmt.Errorf("%w: -modes: unknown mode %q: want %s, comma-separated", loadgen.ErrConfig, m, spec.ModeList(spec.Modes))
		}
	}
	// Config treats zero as "the default"; on the command line zero is a
	// value, and a bad one.
	for _, f := range []struct {
		name string
		v    int
	}{{"clients", c.Clients}, {"window", c.Window}} {
		if err == nil && f.v < 1 {
			err = fmt.Errorf("%w: -%s %d (at least 1)", loadgen.ErrConfig, f.name, f.v)
		}
	}
	if err == nil && c.QPs < 0 {
		err = fmt.Errorf("%w: -queue-pairs %d (0: the mode's default)", loadgen.ErrConfig, c.QPs)
	}
	if err == nil {
		err = c.Validate()
	}
	if err == nil {
		c.AdminDialOptions, err = sec.DialOptions()
	}
	if err == nil && *plotPath != "" {
		err = loadgen.CheckPlotPath(*plotPath)
	}
	if err == nil && *quiet {
		lf.Level = max(lf.Level, slog.LevelError)
	}
	if err == nil {
		c.Logger, err = lf.Logger(stderr)
	}
	if err != nil {
		fail(stderr, err)
		return 2
	}
	if !*quiet {
		c.Progress = stderr
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fail(stderr, err)
			return 1
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := loadgen.Run(ctx, c)
	if rep != nil && !rep.Empty() {
		rep.WriteTable(stdout)
		if *jsonPath != "" {
			if jerr := rep.WriteJSON(*jsonPath); jerr != nil {
				fail(stderr, jerr)
				return 1
			}
			fmt.Fprintf(stdout, "results (JSON) written to %s\n", where(*jsonPath))
		}
		if *plotPath != "" && (len(rep.Results) > 0 || len(rep.Wire) > 0) {
			if perr := rep.Plot(*plotPath); perr != nil {
				fail(stderr, perr)
				return 1
			}
			fmt.Fprintf(stdout, "plot written to %s\n", where(*plotPath))
		}
	}
	switch {
	case err != nil:
		if errors.Is(err, adminclient.ErrUnavailable) && !c.Spawn {
			err = fmt.Errorf("%w (is seqd running at -admin %s? Start it, give its address with -admin HOST:PORT, or let loadgen start one with -spawn)", err, c.Admin)
		}
		fail(stderr, err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	case rep.Violations > 0 || len(rep.Skipped) > 0:
		return 3
	}
	return 0
}
