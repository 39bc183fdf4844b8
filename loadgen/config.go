package loadgen

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("loadgen: invalid config")

// Config is everything loadgen's flags set. Validate fills the defaults.
type Config struct {
	// Admin is a running seqd's admin address, or the comma-separated
	// addresses of every member of its HA group (adminclient.ParseAddrs):
	// loadgen drives the leader. Ignored with Spawn.
	Admin string
	// Spawn starts seqd for the run: SeqdBinary if set, else a seqd next
	// to this executable or on PATH, else in-process (with InProcess).
	Spawn      bool
	SeqdBinary string // "in-process" forces the in-process server
	// InProcess runs the in-process server (loadgen/inprocess.Spawn, for
	// tests); nil: none, Spawn needs a seqd binary. The loadgen command
	// sets none, so that it links no server.
	InProcess Spawner
	SeqdCores string // seqd's -cores (its workers' cores), "" unpinned
	SeqdArgs  []string

	Modes   []string // run in this order; may repeat
	Clients int      // client threads (each a client.Client with its own engine)
	QPs     int      // queue pairs per client; 0: per mode (QPsFor)
	Window  int      // outstanding requests per client, over its QPs

	// SweepWindow and SweepClients, when set, replace Window and Clients
	// with every combination: one result per point, per mode.
	SweepWindow  []int
	SweepClients []int
	// Coalesce lists the clients' client.WithCoalescing settings (ranged
	// requests in flight at most, 0: off) to compare, each point of a
	// mode that serves ranges run once per setting, in order; empty: the
	// client's default. Other modes ignore it.
	Coalesce []int
	// CongestionControl is the clients' client.WithCongestionControl:
	// Timely and the Carousel wheel in mode erpc (others ignore it).
	CongestionControl bool
	// LinkMbps is the clients' client.WithLinkRate, in Mbit/s: the line
	// rate congestion control starts at and scales by; 0: the client's.
	LinkMbps float64

	Duration time.Duration // measured interval per point
	Warmup   time.Duration // before each point's measurement
	Echo     time.Duration // per echo (provider and raw UDP); 0 = default, <0 = skip
	Cores    []int         // pin loadgen's threads to these cores
	Verify   bool
	// VerifyMax bounds the calls kept for verification per point (memory:
	// 24 bytes each); beyond it calls are counted as unverified.
	VerifyMax int

	// Provider and Device are the clients' verbs device. Default: the
	// soft provider on the local address of the route to the seqd (what
	// client.Dial picks without client.WithDevice).
	Provider, Device string
	// ProviderOpts are verbs provider options ("loss=0.01,reorder=0.01")
	// for the clients' devices and a spawned seqd's: fault injection.
	ProviderOpts string
	// AdminDialOptions go to every dial of Admin's admin plane: TLS, a
	// bearer token, or plaintext off loopback (adminclient.ClientSecurity makes
	// them). A spawned seqd is plaintext on loopback: they do not apply.
	AdminDialOptions []grpc.DialOption

	// Engine is "client" (the client library, default) or "wire" (the
	// lean wire-level generator, package loadgen/wire, in the modes
	// spec.WireModes lists; the other modes of Modes run through the
	// client library, at Clients × Window).
	Engine string
	// Wire engine: the flow counts to run (default 1, 64, 1024), the
	// window per flow (0: InFlight/flows, within 1..256), the core the server
	// under test runs on (a spawned seqd's threads, the floor servers and
	// redis-server are pinned to it; -1: unpinned), and what to skip.
	Flows      []int
	FlowWindow int
	// InFlight caps the requests outstanding over all flows (default
	// 256; wire.Config.InFlight): more only wait in the server's socket,
	// and one that waits past spec.MaxResidence is dropped.
	InFlight int
	// FlowTimeout: a request unanswered this long is given up and counted
	// as lost (0: wire.Config's default, spec.MaxAnswerDelay).
	FlowTimeout time.Duration
	// WireSource is the wire generator's first flow source address (flow
	// i uses it +i; "": 127.77.0.1, on loopback). Off loopback, the
	// addresses must be local to the generator's host and routed back to
	// it from the server's (scripts/bench-server-xdp.sh).
	WireSource string
	// WireSources is how many source addresses the flows share
	// (wire.Config.Sources; 0: one per flow).
	WireSources int
	ServerCore  int
	NoFloors    bool
	// Slices: with -engine wire, each server at a flow count is measured
	// in this many slices of Duration/Slices (after Warmup/Slices each),
	// taken in turn with the others' (default 1).
	Slices  int
	NoRedis bool
	// ServerPID is the pid of a seqd not spawned by loadgen, for its CPU
	// time (0: not measured).
	ServerPID int

	Progress io.Writer // a progress line per second; nil for none
	Logger   *slog.Logger
}

// adminOpts are the admin dial options for the seqd the run measures.
func (c *Config) adminOpts() []grpc.DialOption {
	if c.Spawn {
		return nil
	}
	return c.AdminDialOptions
}

// FloorFlag is the hidden loadgen flag that makes the process a floor
// server (ServeFloor).
const FloorFlag = "floor-server"

// The engines.
const (
	EngineClient = "client"
	EngineWire   = "wire"
)

// Point is one (clients, window) combination.
type Point struct{ Clients, Window int }

// Validate fills defaults and checks c.
func (c *Config) Validate() error {
	if c.Admin == "" {
		c.Admin = "127.0.0.1:7070"
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{spec.ModeSpecS0}
	}
	for _, m := range c.Modes {
		if m == "" || strings.ContainsAny(m, " \t,") {
			return fmt.Errorf("%w: mode %q", ErrConfig, m)
		}
	}
	if c.Clients == 0 {
		c.Clients = 1
	}
	if c.Window == 0 {
		c.Window = 64
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = time.Second
	}
	if c.Echo == 0 {
		c.Echo = time.Second
	}
	if c.VerifyMax == 0 {
		c.VerifyMax = 200 << 20
	}
	if c.Provider == "" {
		c.Provider = "soft" // Device "": by route (client.WithDevice)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch c.Engine {
	case "":
		c.Engine = EngineClient
	case EngineClient, EngineWire:
	default:
		return fmt.Errorf("%w: -engine %q (client or wire)", ErrConfig, c.Engine)
	}
	if len(c.Flows) == 0 {
		c.Flows = []int{1, 64, 1024}
	}
	for _, f := range c.Flows {
		if f < 1 || f > 1<<16 {
			return fmt.Errorf("%w: -flows %d (1..65536)", ErrConfig, f)
		}
	}
	if c.InFlight == 0 {
		c.InFlight = 256
	}
	if c.InFlight < 1 {
		return fmt.Errorf("%w: -inflight %d (at least 1)", ErrConfig, c.InFlight)
	}
	if c.FlowWindow < 0 || c.FlowWindow > spec.MaxWindow {
		return fmt.Errorf("%w: -flow-window %d (0..%d)", ErrConfig, c.FlowWindow, spec.MaxWindow)
	}
	if !(c.LinkMbps >= 0) || math.IsInf(c.LinkMbps, 0) {
		return fmt.Errorf("%w: -erpc-link-rate %g (Mbit/s, 0 for the client's default)", ErrConfig, c.LinkMbps)
	}
	if !c.Spawn {
		if _, err := adminclient.ParseAddrs(c.Admin); err != nil {
			return fmt.Errorf("%w: -admin: %v", ErrConfig, err)
		}
	}
	switch {
	case c.Clients < 1 || c.Clients > 256:
		return fmt.Errorf("%w: -clients %d (1..256)", ErrConfig, c.Clients)
	case c.QPs < 0 || c.QPs > maxQPs:
		return fmt.Errorf("%w: -queue-pairs %d (1..%d, or 0 for the mode's default)", ErrConfig, c.QPs, maxQPs)
	case c.Window < 1 || c.Window > c.qpsCap()*spec.MaxWindow:
		// A window below the QP count uses as many QPs as the window.
		return fmt.Errorf("%w: -window %d (1..%d per QP)", ErrConfig, c.Window, spec.MaxWindow)
	case c.Duration < 0 || c.Warmup < 0:
		return fmt.Errorf("%w: negative -duration or -warmup", ErrConfig)
	case c.Slices < 0 || c.Slices > 0 && c.Duration/time.Duration(c.Slices) < time.Millisecond:
		return fmt.Errorf("%w: -slices %d: at least 1 ms of -duration a slice", ErrConfig, c.Slices)
	case c.VerifyMax < 0:
		return fmt.Errorf("%w: negative verify bound", ErrConfig)
	}
	for _, w := range c.SweepWindow {
		if w < 1 || w > c.qpsCap()*spec.MaxWindow {
			return fmt.Errorf("%w: -sweep-window %d (1..%d per QP)", ErrConfig, w, spec.MaxWindow)
		}
	}
	for _, n := range c.Coalesce {
		if n < 0 || n > 64 {
			return fmt.Errorf("%w: -coalesce %d (off, on, or 0..64 ranged requests in flight)", ErrConfig, n)
		}
	}
	for _, n := range c.SweepClients {
		if n < 1 || n > 256 {
			return fmt.Errorf("%w: -sweep-clients %d (1..256)", ErrConfig, n)
		}
	}
	if _, err := verbs.ParseOptions(c.ProviderOpts); err != nil {
		return fmt.Errorf("%w: -provider-opts: %v", ErrConfig, err)
	}
	for _, k := range c.Cores {
		if k < 0 {
			return fmt.Errorf("%w: -cores %d", ErrConfig, k)
		}
	}
	return nil
}

const maxQPs = 64

// qpsCap is the most QPs a client may use.
func (c *Config) qpsCap() int {
	if c.QPs == 0 {
		return maxQPs
	}
	return c.QPs
}

// QPsFor is the number of QPs a client uses for mode at window: -qps, or
// by default 4, and for Spec-S0 one per 16 outstanding requests (a QP's
// 12-bit tag space, quarantined for spec.DefaultQuarantine after each use,
// allows about 500k requests/s); never more than the window.
func (c *Config) QPsFor(mode string, window int) int {
	n := c.QPs
	if n == 0 {
		n = 4
		if mode == spec.ModeSpecS0 {
			n = min(maxQPs, max(n, window/16))
		}
	}
	return max(1, min(n, window))
}

// Points lists the (clients, window) combinations to run per mode.
func (c *Config) Points() []Point {
	cs, ws := c.SweepClients, c.SweepWindow
	if len(cs) == 0 {
		cs = []int{c.Clients}
	}
	if len(ws) == 0 {
		ws = []int{c.Window}
	}
	var ps []Point
	for _, n := range cs {
		for _, w := range ws {
			ps = append(ps, Point{n, w})
		}
	}
	return ps
}

// ParseList splits a comma-separated flag value, dropping empty items.
func ParseList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseInts parses a comma-separated list of integers ("1,4,16").
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, f := range ParseList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %q is not an integer", ErrConfig, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseCoalesce reads -coalesce: on, off or a number of ranged requests
// in flight, comma-separated.
func ParseCoalesce(s string) ([]int, error) {
	var out []int
	for _, f := range ParseList(s) {
		switch f {
		case "on":
			out = append(out, client.DefaultCoalescing)
		case "off":
			out = append(out, 0)
		default:
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%w: -coalesce %q: want on, off or a number, comma-separated", ErrConfig, f)
			}
			out = append(out, n)
		}
	}
	return out, nil
}
