package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
)

// TestReconnectKeepsOthersSession is issue 12's defect 1: after an epoch
// change a reconnecting client released its old session by ID on the
// new data path, whose IDs restart at 1, and so cut off whichever client
// had reconnected first under that ID. A connects first (session 1),
// then B; after each mode switch B reconnects first (taking the new
// data path's first session), then A. Both sessions must survive A's
// reconnect, and B must keep being served at once.
func TestReconnectKeepsOthersSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startMode(t, "", spec.ModeSpecS0)
	adm := admintest.Client(ctx, t, addr)
	a := dialN(t, ctx, addr, "", 1)[0]
	b := dialN(t, ctx, addr, "", 1)[0]
	var v verify.History
	origin := time.Now()
	call := func(name string, who int, timeout time.Duration) error {
		cctx, ccancel := context.WithTimeout(ctx, timeout)
		defer ccancel()
		c := a
		if who == 1 {
			c = b
		}
		start := time.Since(origin)
		ts, err := c.GetTimestamp(cctx)
		if err != nil {
			return err
		}
		v.Record(who, verify.Call{Start: start, End: time.Since(origin), Value: uint64(ts)})
		return nil
	}
	for _, who := range []int{0, 1} {
		if err := call("first", who, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i, mode := range append(slices.Clone(spec.Modes[1:]), spec.Modes[1]) { // every other mode, then one again
		if _, err := adm.SetMode(ctx, &adminpb.SetModeRequest{Mode: mode}); err != nil {
			t.Fatalf("switch %d to %s: %v", i, mode, err)
		}
		// B reconnects first, then A (which releases its old session).
		if err := call("b reconnects", 1, 10*time.Second); err != nil {
			t.Fatalf("switch %d (%s): B's first call: %v", i, mode, err)
		}
		if err := call("a reconnects", 0, 10*time.Second); err != nil {
			t.Fatalf("switch %d (%s): A's first call: %v", i, mode, err)
		}
		if n := sessionCount(ctx, t, adm); n != 2 {
			t.Errorf("switch %d (%s): the server holds %d sessions after both reconnected, want 2", i, mode, n)
		}
		// B keeps being served without reconnecting: each call within a
		// second (a lost session would be noticed only by a KeepAlive,
		// up to a third of the 30 s lease later).
		for k := range 5 {
			if err := call("b again", 1, time.Second); err != nil {
				t.Fatalf("switch %d (%s): B's call %d after A reconnected: %v", i, mode, k, err)
			}
		}
		if err := call("a again", 0, time.Second); err != nil {
			t.Fatalf("switch %d (%s): A's call after reconnecting: %v", i, mode, err)
		}
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls verified across 4 mode switches", v.Len())
}
