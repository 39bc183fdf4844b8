package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/seqd/seqd/admin/adminpb"
)

// runAdvance moves the server's counter forward (Admin.Advance): every
// value handed out afterwards is above VALUE. The server refuses a value
// at or below its current one, and a step beyond its bound.
func runAdvance(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("advance", flag.ContinueOnError)
	pos, err := parseArgs(fs, e, args, 1, "exactly one VALUE")
	if err != nil {
		return err
	}
	v, err := strconv.ParseUint(pos[0], 0, 64)
	if err != nil || v == 0 {
		return usageError{fmt.Sprintf("VALUE %q: want a positive 64-bit integer", pos[0])}
	}
	var resp *adminpb.AdvanceResponse
	err = e.onLeader(ctx, func(c adminpb.AdminClient) (err error) {
		resp, err = c.Advance(ctx, &adminpb.AdvanceRequest{Min: v})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "advanced %d -> %d (every later value is above %d)\n", resp.GetPrevious(), resp.GetCurrent(), v)
	return nil
}

// runTransferLeader hands the HA group's leadership to a standby
// (Admin.TransferLeader); on a standby it follows the redirect to the
// leader.
func runTransferLeader(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("transfer-leader", flag.ContinueOnError)
	if _, err := parseArgs(fs, e, args, 0, "no arguments"); err != nil {
		return err
	}
	var resp *adminpb.TransferLeaderResponse
	err := e.onLeader(ctx, func(c adminpb.AdminClient) (err error) {
		resp, err = c.TransferLeader(ctx, &adminpb.TransferLeaderRequest{})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "leader %s -> %s\n", resp.GetPreviousLeader(), resp.GetLeader())
	return nil
}
