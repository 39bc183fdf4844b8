package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// runSetMode switches the server's data-path mode (Admin.SetMode).
func runSetMode(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("set-mode", flag.ContinueOnError)
	pos, err := parseArgs(fs, e, args, 1, "exactly one mode")
	if err != nil {
		return err
	}
	if _, ok := spec.Facts(pos[0]); !ok {
		return usageError{fmt.Sprintf("unknown mode %q: want %s", pos[0], spec.ModeList(spec.Modes))}
	}
	var resp *adminpb.SetModeResponse
	var f spec.Format
	err = e.onLeader(ctx, func(c adminpb.AdminClient) (err error) {
		if st, err := c.Status(ctx, &adminpb.StatusRequest{}); err == nil {
			f, _ = spec.ParseFormat(st.GetFormat())
		}
		resp, err = c.SetMode(ctx, &adminpb.SetModeRequest{Mode: pos[0]})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "mode %s -> %s (values continue above %s, epoch %d)\n", resp.GetPrevious(), resp.GetMode(), show(f, resp.GetHigh()), resp.GetEpoch())
	return nil
}
