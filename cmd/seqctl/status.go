package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// runStatus prints the status of one member: the first of -admin that
// answers (a standby answers too, with its own role, version, format and
// mode, the leader's term and epoch).
func runStatus(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	output := fs.String("o", "text", "output `format`: text (a table) or json (the StatusResponse as protojson)")
	asJSON := fs.Bool("json", false, "the same as -o json")
	if err := parseFlags(fs, e, args); err != nil {
		return err
	}
	switch *output {
	case "text":
	case "json":
		*asJSON = true
	default:
		return usageError{fmt.Sprintf("-o %q: want text or json", *output)}
	}
	var st *adminpb.StatusResponse
	addr, err := e.onAny(ctx, func(_ string, cc *grpc.ClientConn) (err error) {
		st, err = adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(st)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	return printStatus(e.stdout, addr, st)
}

// printStatus writes st, the answer of the member at addr, as aligned
// tables: the member and the oracle, then one row per worker, then the
// provider's counters in name order.
func printStatus(w io.Writer, addr string, st *adminpb.StatusResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	current, mark, headroom := readable(st, time.Now())
	leader := st.GetLeader()
	if leader == "" {
		leader = "-"
	}
	for _, row := range [][2]any{
		{"address", addr},
		{"version", st.GetVersion()},
		{"role", st.GetRole()},
		{"leader", leader},
		{"term", st.GetTerm()},
		{"uptime", uptime(st.GetUptimeMs())},
		{"mode", st.GetMode()},
		{"format", st.GetFormat()},
		{"epoch", st.GetEpoch()},
		{"current", current},
		{"persisted_mark", mark},
		{"headroom", headroom},
		{"sessions", st.GetSessions()},
		{"served", st.GetServed()},
		{"spec_misses", st.GetSpecMisses()},
		{"drops", st.GetDrops()},
		{"clock_steps_back", st.GetClockStepsBack()},
		{"persist_stalls", st.GetPersistStalls()},
	} {
		fmt.Fprintf(tw, "%s\t%v\n", row[0], row[1])
	}
	if ws := st.GetWorkers(); len(ws) > 0 {
		fmt.Fprintf(tw, "\nWORKER\tCORE\tBATCHES\tREQUESTS\tAVG_BATCH\tSPEC_MISSES\tRETRANSMITS\tDROPS\n")
		for _, wk := range ws {
			core := "-"
			if wk.GetCore() >= 0 {
				core = fmt.Sprint(wk.GetCore())
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.2f\t%d\t%d\t%d\n", wk.GetId(), core, wk.GetBatches(), wk.GetRequests(),
				wk.GetAvgBatch(), wk.GetSpecMisses(), wk.GetRetransmits(), wk.GetDrops())
		}
	}
	if pc := st.GetProviderCounters(); len(pc) > 0 {
		fmt.Fprintf(tw, "\nPROVIDER COUNTER\tVALUE\n")
		names := make([]string, 0, len(pc))
		for name := range pc {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Fprintf(tw, "%s\t%d\n", name, pc[name])
		}
	}
	return tw.Flush()
}

// readable renders the current value, the persisted mark and the
// headroom between them as the server's format reads them: times and a
// duration in hybrid, counts in counter, each raw value in brackets. A
// hybrid server that has handed out nothing yet will start at its clock,
// so its headroom is counted from now (this host's clock).
func readable(st *adminpb.StatusResponse, now time.Time) (current, mark, headroom string) {
	f, err := spec.ParseFormat(st.GetFormat())
	if err != nil {
		// A format this seqctl does not know: the raw numbers.
		cur, m := st.GetCurrent(), st.GetPersistedMark()
		headroom = "-"
		if m >= cur {
			headroom = fmt.Sprint(m - cur)
		}
		return fmt.Sprint(cur), fmt.Sprint(m), headroom
	}
	cur, m := st.GetCurrent(), st.GetPersistedMark()
	raw := func(v uint64) string {
		if f == spec.FormatHybrid {
			return fmt.Sprintf("%s  (%d)", adminclient.Value(f, v), v)
		}
		return fmt.Sprint(v)
	}
	current, mark = raw(cur), raw(m)
	from, note := cur, ""
	if cur == 0 {
		current = "0  (none handed out yet)"
		if f == spec.FormatHybrid {
			from, note = spec.HybridFloor(now.UnixMilli()), "  (from now: none handed out yet)"
		}
	}
	switch {
	case m > from:
		headroom = adminclient.Step(f, m-from) + note
	case f == spec.FormatHybrid && cur == 0:
		headroom = "none: the mark is behind this host's clock"
	default:
		headroom = adminclient.Step(f, 0)
	}
	return current, mark, headroom
}

// uptime renders milliseconds as a duration: tenths of a second in the
// first minute (1.2s), whole seconds after (1h2m3s).
func uptime(ms uint64) string {
	if ms > uint64(math.MaxInt64/time.Millisecond) {
		return fmt.Sprintf("%dms", ms)
	}
	d := time.Duration(ms) * time.Millisecond
	if d < time.Minute {
		return d.Truncate(100 * time.Millisecond).String()
	}
	return d.Truncate(time.Second).String()
}
