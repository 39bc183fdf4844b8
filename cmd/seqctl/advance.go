package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// runAdvance moves the server's counter forward (Admin.Advance): every
// value handed out afterwards is above VALUE. VALUE is read in the
// server's format (adminclient.ParseValue): a time or +DURATION in
// hybrid, a count or +N in counter, or a raw value in either. seqctl
// refuses a value at or below the current one itself, in those units;
// the server refuses that too, and a step beyond its bound or budget.
func runAdvance(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("advance", flag.ContinueOnError)
	pos, err := parseArgs(fs, e, args, 1, "exactly one VALUE")
	if err != nil {
		return err
	}
	var resp *adminpb.AdvanceResponse
	var f spec.Format
	var v uint64
	err = e.onLeader(ctx, func(c adminpb.AdminClient) error {
		st, err := c.Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			return err
		}
		if f, err = spec.ParseFormat(st.GetFormat()); err != nil {
			return fmt.Errorf("the server's format: %w", err)
		}
		// +DURATION counts from the current value, or, on a hybrid
		// server that has handed out nothing yet, from now: its first
		// value will be its clock's.
		cur, base, plus := st.GetCurrent(), st.GetCurrent(), "+N"
		if f == spec.FormatHybrid {
			base, plus = max(cur, spec.HybridFloor(time.Now().UnixMilli())), "+DURATION"
		}
		if v, err = adminclient.ParseValue(f, pos[0], base); err != nil {
			return usageError{"VALUE " + err.Error()}
		}
		if v == 0 {
			return usageError{"VALUE 0: every value is above 0; want a later one"}
		}
		if v <= cur {
			return fmt.Errorf("VALUE %s is not above the current value %s: the counter never moves backward (give a later value, or %s)",
				show(f, v), show(f, cur), plus)
		}
		resp, err = c.Advance(ctx, &adminpb.AdvanceRequest{Min: v})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "advanced %s -> %s (every later value is above %s)\n",
		show(f, resp.GetPrevious()), show(f, resp.GetCurrent()), show(f, v))
	return nil
}

// show renders v in f's units, with the raw value beside a hybrid time.
func show(f spec.Format, v uint64) string {
	if f == spec.FormatHybrid {
		return fmt.Sprintf("%s (%d)", adminclient.Value(f, v), v)
	}
	return adminclient.Value(f, v)
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
