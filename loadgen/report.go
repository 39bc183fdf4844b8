package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/seqd/seqd/spec"
)

// A column of loadgen's tables: its heading and what it means, for the
// legend under the table and for -h (Columns).
type column struct{ name, help string }

// clientColumns are the client engine's table's columns.
var clientColumns = []column{
	{"mode", "the data-path mode (seqd -mode)"},
	{"clients", "client threads, each its own client (-clients)"},
	{"window", "requests outstanding per client (-window)"},
	{"coalesce", "modes with ranges: callers coalesced into ranged requests, this many in flight per client (-coalesce; off: one request per call)"},
	{"Mops/s", "answers per second, millions"},
	{"Mops/core", "answers per second of seqd's CPU time (user + system), millions: timestamps/s per server core (a spawned seqd, or -server-pid)"},
	{"p50 µs", "latency, median"},
	{"p90 µs", "latency, 90th percentile"},
	{"p99 µs", "latency, 99th percentile"},
	{"p99.9 µs", "latency, 99.9th percentile"},
	{"max µs", "latency, slowest answer"},
	{"avg batch", "requests per batch of the server's workers (-: a mode without workers)"},
	{"spec misses", "spec-s0: answers whose speculated high part was wrong, so the client asked again (seqd's count, else the clients')"},
	{"retransmits", "requests the clients sent again after no answer came in time"},
	{"drops", "requests seqd dropped (its Status drops: full queues, bad or late packets)"},
	{"of echo floor", "Mops/s as a share of the raw UDP echo measured in the same run (-echo)"},
}

// wireColumns are the wire engine's table's columns.
var wireColumns = []column{
	{"server", "provider-echo (the verbs provider's header-only echo), raw-echo (a raw UDP GSO/GRO echo) or seqd and its mode"},
	{"flows", "emulated client QPs, each its own source address (-flows)"},
	{"window", "requests outstanding per flow (-flow-window, else -inflight/flows)"},
	{"Mops/s", "answers per second, millions"},
	{"user ns/req", "the server's user CPU time per request"},
	{"sys ns/req", "the server's kernel CPU time per request"},
	{"gen ns/req", "the generator's own CPU time per request (user + kernel)"},
	{"gen busy", "share of the time the generator moved packets: near 100%, it is the bottleneck"},
	{"p50 µs", "latency, median"},
	{"p99 µs", "latency, 99th percentile"},
	{"p99.9 µs", "latency, 99.9th percentile"},
	{"lost", "requests given up unanswered after -flow-timeout"},
	{"stale", "answers that came for no outstanding request (late, after being given up)"},
	{"spec misses", "spec-s0: answers with the full value, as the speculated high part was wrong"},
	{"server drops", "requests seqd's workers dropped (Status drops, warm-up included)"},
	{"avg batch", "requests per batch of seqd's workers"},
	{"checked", "values checked for uniqueness"},
	{"of provider echo", "Mops/s over provider-echo's at the same flow count"},
	{"of raw echo", "Mops/s over raw-echo's at the same flow count"},
	{"of redis", "Mops/s over Redis INCR's"},
}

// Columns explains the tables loadgen prints, one column a line: for
// loadgen -h.
func Columns() string {
	var b strings.Builder
	for _, t := range []struct {
		title string
		cols  []column
	}{{"-engine client", clientColumns}, {"-engine wire", wireColumns}} {
		fmt.Fprintf(&b, "\ncolumns of the table (%s):\n", t.title)
		for _, c := range t.cols {
			fmt.Fprintf(&b, "  %-16s %s\n", c.name, c.help)
		}
	}
	return b.String()
}

// header is a table's heading line for tabwriter.
func header(cols []column) string {
	var b strings.Builder
	for _, c := range cols {
		b.WriteString(c.name + "\t")
	}
	return b.String()
}

// legend is a short line under a table naming the columns a reader is
// least likely to guess, with where loadgen -h explains every one.
func legend(w io.Writer, cols []column, names ...string) {
	for _, n := range names {
		for _, c := range cols {
			if c.name == n {
				fmt.Fprintf(w, "  %s: %s\n", n, c.help)
			}
		}
	}
	fmt.Fprintln(w, "  (loadgen -h explains every column)")
}

// WriteTable prints one row per result, like Table 4.1 of the thesis: the
// mode, its throughput and latency, the server's mean batch, the events
// that cost throughput, and the throughput as a fraction of the raw UDP
// echo floor measured in the same run; under it, what the columns mean.
// The wire engine's report has its own table, then the modes the wire
// generator does not speak, measured through the client library.
func (r *Report) WriteTable(w io.Writer) error {
	if len(r.Wire) > 0 || r.Redis != nil {
		if err := r.writeWireTable(w); err != nil {
			return err
		}
		if len(r.Results) == 0 && len(r.Skipped) == 0 {
			return nil
		}
		fmt.Fprintf(w, "\nmodes the wire generator does not speak (%s), measured through the client library:\n", spec.ModeList(r.modeOrder()))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header(clientColumns))
	for _, x := range r.Results {
		frac := "-"
		if r.EchoFloorOps > 0 {
			frac = fmt.Sprintf("%.0f%%", 100*x.ThroughputOps/r.EchoFloorOps)
		}
		batch := "-" // a mode without server workers (atomics)
		if x.AvgBatch > 0 {
			batch = fmt.Sprintf("%.1f", x.AvgBatch)
		}
		co := "-"
		if x.Coalesce != nil {
			co = "off"
			if *x.Coalesce > 0 {
				co = fmt.Sprint(*x.Coalesce)
			}
		}
		perCore := "-"
		if x.OpsPerServerCore > 0 {
			perCore = fmt.Sprintf("%.3f", x.OpsPerServerCore/1e6)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.3f\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d\t%d\t%d\t%s\t\n",
			x.Mode, x.Clients, x.Window, co, x.ThroughputOps/1e6, perCore, x.P50us, x.P90us, x.P99us, x.P999us, x.Maxus,
			batch, x.SpecMisses, x.Retransmits, x.Drops, frac)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	legend(w, clientColumns, "coalesce", "Mops/core", "avg batch", "spec misses", "retransmits", "drops", "of echo floor")
	if r.EchoFloorOps > 0 {
		fmt.Fprintf(w, "echo floor (same run): raw UDP GSO/GRO %.3f Mops/s, provider UD echo %.3f Mops/s\n",
			r.Echo.RawUDP/1e6, r.Echo.Provider/1e6)
	}
	verified, unverified, failed := 0, uint64(0), uint64(0)
	for _, x := range r.Results {
		verified += x.Verified
		unverified += x.Unverified
		failed += x.Errors
	}
	fmt.Fprintf(w, "verification: %d calls checked, %d violations", verified, r.Violations)
	if unverified > 0 {
		fmt.Fprintf(w, ", %d calls not kept for checking (-verify-max)", unverified)
	}
	if failed > 0 {
		fmt.Fprintf(w, ", %d requests failed", failed)
	}
	fmt.Fprintln(w)
	if len(r.Wire) == 0 {
		for _, e := range r.Examples {
			fmt.Fprintf(w, "  violation: %s\n", e)
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped %s: %v\n", s.Mode, s.Err)
	}
	return nil
}

// Empty reports whether the run measured nothing: no table to print.
func (r *Report) Empty() bool {
	return len(r.Results) == 0 && len(r.Wire) == 0 && r.Redis == nil && len(r.Skipped) == 0
}

// WriteJSON writes the report's JSON to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("loadgen: json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("loadgen: json: %w", err)
	}
	return nil
}

// writeWireTable prints the wire engine's results: one row per server and
// flow count, seqd's as ratios to the floors of the same flow count, then
// Redis INCR, then one line per flow count in the form make bench-server
// ends with.
func (r *Report) writeWireTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header(wireColumns))
	ratio := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v)
	}
	var redis float64
	if r.Redis != nil {
		redis = r.Redis.Ops / 1e6
	}
	for _, x := range r.Wire {
		ofRedis := "-"
		if x.Server == "seqd" && redis > 0 {
			ofRedis = fmt.Sprintf("%.2f", x.Mops/redis)
		}
		drops, batch, name := "-", "-", x.Server
		if x.Server == "seqd" {
			name = "seqd " + x.Mode
			drops, batch = fmt.Sprint(x.ServerDrops), fmt.Sprintf("%.1f", x.AvgBatch)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.0f\t%.0f\t%.0f\t%.0f%%\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t\n",
			name, x.Flows, x.Window, x.Mops, x.UserNsPerReq, x.SysNsPerReq, x.GenUserNsPerReq+x.GenSysNsPerReq, 100*x.GenBusy, x.P50us, x.P99us, x.P999us,
			x.Lost, x.Stale, x.SpecMisses, drops, batch, x.Checked, ratio(x.OfProviderEcho), ratio(x.OfRawEcho), ofRedis)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	legend(w, wireColumns, "gen busy", "lost", "stale", "spec misses", "server drops")
	for _, x := range r.Wire {
		if x.Server == "seqd" && x.CPUFrom != "" {
			fmt.Fprintf(w, "seqd CPU from %s (whole process); floors' from their processes' stat\n", x.CPUFrom)
			break
		}
	}
	for _, x := range r.Wire {
		if x.Server != "seqd" || x.AdmitSeconds <= 0 {
			continue
		}
		mem := ""
		if x.ServerBytesPerFlow != 0 {
			mem = fmt.Sprintf(", seqd's RSS %+.0f B per flow", x.ServerBytesPerFlow)
		}
		fmt.Fprintf(w, "seqd %s flows=%d: admitted in %.3f s (%.0f flows/s)%s; p99.99 %.1f µs\n",
			x.Mode, x.Flows, x.AdmitSeconds, float64(x.Flows)/x.AdmitSeconds, mem, x.P9999us)
	}
	if x := r.Redis; x != nil {
		if x.Skipped != "" {
			fmt.Fprintf(w, "redis INCR: skipped: %s\n", x.Skipped)
		} else {
			fmt.Fprintf(w, "redis INCR (-c %d -P %d, same run): %.3f Mops/s, server %.0f ns/req user, %.0f sys\n",
				x.Conns, x.Pipeline, x.Ops/1e6, x.UserNsPerReq, x.SysNsPerReq)
		}
	}
	fmt.Fprintf(w, "verification: %d violations\n", r.Violations)
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  violation: %s\n", e)
	}
	for _, x := range r.Wire {
		if x.Server != "seqd" || x.Mode != spec.ModeSpecS0 {
			continue
		}
		floor := 0.0
		if x.OfProviderEcho > 0 {
			floor = x.Mops / x.OfProviderEcho
		}
		fmt.Fprintf(w, "seqd_mops=%.3f floor_mops=%.3f ratio=%.2f flows=%d\n", x.Mops, floor, x.OfProviderEcho, x.Flows)
	}
	return nil
}

// Params are what a run was asked for, as the plot's heading and the
// JSON report state them.
type Params struct {
	Engine     string `json:"engine"`
	Duration   string `json:"duration"` // per point (wire: per server and flow count)
	Warmup     string `json:"warmup"`
	Slices     int    `json:"slices,omitempty"`   // wire
	InFlight   int    `json:"inflight,omitempty"` // wire
	ServerCore int    `json:"server_core"`        // wire; -1 unpinned
	Clients    []int  `json:"clients,omitempty"`  // client engine
	Windows    []int  `json:"windows,omitempty"`  // client engine (wire: modes it does not speak)
	Provider   string `json:"provider"`
}

func (c *Config) params() Params {
	p := Params{Engine: c.Engine, Duration: c.Duration.String(), Warmup: c.Warmup.String(), Provider: c.Provider, ServerCore: c.ServerCore}
	if c.Engine == EngineWire {
		p.Slices, p.InFlight = c.Slices, c.InFlight
	}
	for _, pt := range c.Points() {
		if !slices.Contains(p.Clients, pt.Clients) {
			p.Clients = append(p.Clients, pt.Clients)
		}
		if !slices.Contains(p.Windows, pt.Window) {
			p.Windows = append(p.Windows, pt.Window)
		}
	}
	return p
}

// heading is the plot's first line: the run's parameters.
func (p Params) heading() string {
	if p.Engine == "" {
		return "loadgen"
	}
	s := fmt.Sprintf("loadgen -engine %s -provider %s: %s measured after %s warm-up", p.Engine, p.Provider, p.Duration, p.Warmup)
	if p.Engine == EngineWire {
		s += " per server and flow count"
		if p.Slices > 1 {
			s += fmt.Sprintf(" (in %d slices)", p.Slices)
		}
		s += fmt.Sprintf(", at most %d requests in flight", p.InFlight)
		if p.ServerCore >= 0 {
			s += fmt.Sprintf(", servers on core %d", p.ServerCore)
		}
		return s
	}
	return s + fmt.Sprintf(" per point; clients %s, window %s", ints(p.Clients), ints(p.Windows))
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
