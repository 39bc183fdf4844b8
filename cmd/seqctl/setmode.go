package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/seqd/seqd/admin/adminpb"
)

// runSetMode switches the server's data-path mode (Admin.SetMode).
func runSetMode(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("set-mode", flag.ContinueOnError)
	pos, err := parseArgs(fs, e, args, 1, "exactly one mode")
	if err != nil {
		return err
	}
	var resp *adminpb.SetModeResponse
	err = e.onLeader(ctx, func(c adminpb.AdminClient) (err error) {
		resp, err = c.SetMode(ctx, &adminpb.SetModeRequest{Mode: pos[0]})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "mode %s -> %s (values continue above %d, epoch %d)\n", resp.GetPrevious(), resp.GetMode(), resp.GetHigh(), resp.GetEpoch())
	return nil
}
