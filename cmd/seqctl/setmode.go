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
	if err := parseFlags(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"want exactly one mode"}
	}
	cc, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cc.Close()
	resp, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: fs.Arg(0)})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "mode %s -> %s (values continue above %d, epoch %d)\n", resp.GetPrevious(), resp.GetMode(), resp.GetHigh(), resp.GetEpoch())
	return nil
}
