package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/spec"
)

// tsJSON is one timestamp in -o json form. A counter-format value has
// no physical or logical part.
type tsJSON struct {
	Timestamp  uint64  `json:"timestamp"`
	Format     string  `json:"format"`
	Physical   string  `json:"physical,omitempty"`    // hybrid: RFC 3339, UTC, milliseconds
	PhysicalMs int64   `json:"physical_ms,omitempty"` // hybrid: Unix milliseconds
	Logical    *uint32 `json:"logical,omitempty"`     // hybrid
}

// decodeTS decodes v as format f lays it out.
func decodeTS(f spec.Format, v uint64) tsJSON {
	if f != spec.FormatHybrid {
		return tsJSON{Timestamp: v, Format: f.String()}
	}
	p, l := spec.HybridPhysical(v), spec.HybridLogical(v)
	return tsJSON{Timestamp: v, Format: f.String(), Physical: p.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		PhysicalMs: p.UnixMilli(), Logical: &l}
}

// printTS writes ts as text (one "TS  physical  logical" line each for
// hybrid, the bare value for counter) or as JSON (one object, or an
// array for several).
func printTS(w io.Writer, output string, ts []tsJSON) error {
	if output == "json" {
		var x any = ts
		if len(ts) == 1 {
			x = ts[0]
		}
		b, err := json.MarshalIndent(x, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	for _, t := range ts {
		var err error
		if t.Logical == nil {
			_, err = fmt.Fprintf(w, "%d\n", t.Timestamp)
		} else {
			_, err = fmt.Fprintf(w, "%d\tphysical %s\tlogical %d\n", t.Timestamp, t.Physical, *t.Logical)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("o", "text", "output `format`: text or json")
}

func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return usageError{fmt.Sprintf("-o %q: want text or json", o)}
	}
	return nil
}

// runGet takes timestamps through the data path with the client library
// (the server's admin address, or an HA group's as a comma list).
func runGet(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	n := fs.Int("n", 1, "how many timestamps (requested together)")
	output := outputFlag(fs)
	if err := parseFlags(fs, e, args); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	if *n < 1 || *n > 1<<16 {
		return usageError{fmt.Sprintf("-n %d: want 1..65536", *n)}
	}
	// The server's format says how to read its values.
	var st *adminpb.StatusResponse
	_, err := e.onAny(ctx, func(_ string, cc *grpc.ClientConn) (err error) {
		st, err = adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
		return err
	})
	if err != nil {
		return err
	}
	f, err := spec.ParseFormat(st.GetFormat())
	if err != nil {
		return fmt.Errorf("the server's format: %w", err)
	}
	g, err := e.group()
	if err != nil {
		return err
	}
	// The client library takes the same list and connects to the leader.
	c, err := client.Dial(ctx, strings.Join(g.Addrs, ","), client.WithAdminDialOptions(e.opts...), client.WithName("seqctl"),
		client.WithLogger(e.log))
	if err != nil {
		return err
	}
	defer c.Close()
	dst := make([]client.Timestamp, *n)
	if err := c.GetTimestamps(ctx, dst); err != nil {
		return err
	}
	out := make([]tsJSON, len(dst))
	for i, t := range dst {
		out[i] = decodeTS(f, uint64(t))
	}
	return printTS(e.stdout, *output, out)
}

// runDecode splits a hybrid timestamp into its physical time and logical
// part (pd-ctl's tso). It needs no server.
func runDecode(_ context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	output := outputFlag(fs)
	pos, err := parseArgs(fs, e, args, 1, "one timestamp (decimal, or 0x hex)")
	if err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	v, err := strconv.ParseUint(strings.ReplaceAll(pos[0], "_", ""), 0, 64)
	if err != nil {
		return usageError{fmt.Sprintf("timestamp %q: want a 64-bit value, decimal or 0x hex (as seqctl get prints it)", pos[0])}
	}
	return printTS(e.stdout, *output, []tsJSON{decodeTS(spec.FormatHybrid, v)})
}
