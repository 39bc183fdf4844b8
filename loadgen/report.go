package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/seqd/seqd/spec"
)

// WriteTable prints one row per result, like Table 4.1 of the thesis: the
// mode, its throughput and latency, the server's mean batch, the events
// that cost throughput, and the throughput as a fraction of the raw UDP
// echo floor measured in the same run.
func (r *Report) WriteTable(w io.Writer) error {
	if len(r.Wire) > 0 || r.Redis != nil {
		return r.writeWireTable(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tclients\twindow\tMops/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tmax µs\tavg batch\tspec misses\tretransmits\tdrops\tof echo floor\t")
	for _, x := range r.Results {
		frac := "-"
		if r.EchoFloorOps > 0 {
			frac = fmt.Sprintf("%.0f%%", 100*x.ThroughputOps/r.EchoFloorOps)
		}
		batch := "-" // a mode without server workers (atomics)
		if x.AvgBatch > 0 {
			batch = fmt.Sprintf("%.1f", x.AvgBatch)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d\t%d\t%d\t%s\t\n",
			x.Mode, x.Clients, x.Window, x.ThroughputOps/1e6, x.P50us, x.P90us, x.P99us, x.P999us, x.Maxus,
			batch, x.SpecMisses, x.Retransmits, x.Drops, frac)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
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
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  violation: %s\n", e)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped %s: %v\n", s.Mode, s.Err)
	}
	return nil
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
	fmt.Fprintln(tw, "server\tflows\twindow\tMops/s\tuser ns/req\tsys ns/req\tgen ns/req\tgen busy\tp50 µs\tp99 µs\tp99.9 µs\tlost\tstale\tspec misses\tserver drops\tavg batch\tchecked\tof provider echo\tof raw echo\tof redis\t")
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
	for _, x := range r.Wire {
		if x.Server == "seqd" && x.CPUFrom != "" {
			fmt.Fprintf(w, "seqd CPU from %s (whole process); floors' from their processes' stat\n", x.CPUFrom)
			break
		}
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
