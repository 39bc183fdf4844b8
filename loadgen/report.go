package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// WriteTable prints one row per result, like Table 4.1 of the thesis: the
// mode, its throughput and latency, the server's mean batch, the events
// that cost throughput, and the throughput as a fraction of the raw UDP
// echo floor measured in the same run.
func (r *Report) WriteTable(w io.Writer) error {
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
