package ha_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/spec"
)

// haModes are the modes an HA group runs (haserve.Modes), from the table:
// every mode but atomics, whose NIC counter a lease cannot fence.
var haModes = spec.HAModes()

// adminCall runs f on the admin plane of addr.
func adminCall[R any](t *testing.T, addr string, f func(context.Context, adminpb.AdminClient) (R, error)) (R, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		var zero R
		return zero, err
	}
	defer cc.Close()
	return f(ctx, adminpb.NewAdminClient(cc))
}

// servedIn dials a client over every address, checks that it connects in
// mode and gets values above after, and returns the last value.
func servedIn(t *testing.T, ps []*seqdProc, mode string, after uint64) uint64 {
	t.Helper()
	var addrs []string
	for _, p := range ps {
		addrs = append(addrs, p.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithDevice("soft", "127.0.0.1:0", ""),
		client.WithLogger(quiet()), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("dial %v: %v", addrs, err)
	}
	defer cl.Close()
	last := after
	for range 50 {
		ts, err := cl.GetTimestamp(ctx)
		if err != nil {
			t.Fatalf("GetTimestamp in %s: %v", mode, err)
		}
		if uint64(ts) <= last {
			t.Fatalf("in %s got %d, not above %d", mode, uint64(ts), last)
		}
		last = uint64(ts)
	}
	if got := cl.Mode(); got != mode {
		t.Fatalf("client served in mode %q, want %q", got, mode)
	}
	return last
}

// leaderMode waits for a leader among ps (other than skip) and checks the
// mode its Status reports.
func leaderMode(t *testing.T, ps []*seqdProc, skip *seqdProc, want, when string) *seqdProc {
	t.Helper()
	lead := seqdLeader(t, ps, skip, 5*ttl)
	st, err := lead.status()
	if err != nil {
		t.Fatalf("%s: status of the leader: %v", when, err)
	}
	if st.GetMode() != want {
		t.Fatalf("%s: the leader serves mode %q, want %q (the mode set before)", when, st.GetMode(), want)
	}
	return lead
}

// TestSeqdModeSurvives is item 1 of issue 27: a mode set with SetMode
// (seqctl set-mode) is the group's, kept in etcd. For every mode an HA
// group runs, the real seqd binary, three instances: set the mode, then
// kill -9 the leader, transfer leadership, and restart the whole group
// (without -init), every instance's -mode being another mode: each new
// leader starts in the mode set, and clients are served in it, above
// every earlier value.
func TestSeqdModeSurvives(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seqd and etcd processes and waits out lease TTLs; skipped in -short")
	}
	c := hatest.Start(t, 1)
	bin := buildSeqd(t)
	for _, mode := range haModes {
		t.Run(mode, func(t *testing.T) {
			prefix := "/" + t.Name()
			// Every instance's -mode is another one: only the stored
			// mode can bring the group back to mode.
			flag := spec.ModeSpecS0
			if mode == spec.ModeSpecS0 {
				flag = spec.ModeHERD
			}
			var ps []*seqdProc
			for range 3 {
				ps = append(ps, startSeqdArgs(t, bin, c.Endpoints(), prefix, "-init", "-mode", flag))
			}
			lead := seqdLeader(t, ps, nil, 15*time.Second)
			if _, err := adminCall(t, lead.addr, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.SetModeResponse, error) {
				return a.SetMode(ctx, &adminpb.SetModeRequest{Mode: mode})
			}); err != nil {
				t.Fatalf("SetMode(%s): %v", mode, err)
			}
			last := servedIn(t, ps, mode, 0)

			lead.signal(syscall.SIGKILL)
			<-lead.done
			lead = leaderMode(t, ps, lead, mode, "after the leader's kill -9")
			last = servedIn(t, ps, mode, last)

			if _, err := adminCall(t, lead.addr, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.TransferLeaderResponse, error) {
				return a.TransferLeader(ctx, &adminpb.TransferLeaderRequest{})
			}); err != nil {
				t.Fatalf("TransferLeader: %v", err)
			}
			leaderMode(t, ps, lead, mode, "after a leader transfer")
			last = servedIn(t, ps, mode, last)

			for _, p := range ps {
				p.signal(syscall.SIGKILL)
				<-p.done
			}
			var again []*seqdProc
			for range 3 { // no -init: the group exists
				again = append(again, startSeqdArgs(t, bin, c.Endpoints(), prefix, "-mode", flag))
			}
			leaderMode(t, again, nil, mode, "after a restart of the whole group")
			servedIn(t, again, mode, last)
		})
	}
}

// TestSeqdAtomicsRefusedInHA: the one mode an HA group does not run is
// refused with the reason, and the group keeps serving its mode.
func TestSeqdAtomicsRefusedInHA(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seqd and etcd processes; skipped in -short")
	}
	c := hatest.Start(t, 1)
	bin := buildSeqd(t)
	ps := []*seqdProc{startSeqd(t, bin, c.Endpoints(), "/"+t.Name())}
	lead := seqdLeader(t, ps, nil, 15*time.Second)
	_, err := adminCall(t, lead.addr, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.SetModeResponse, error) {
		return a.SetMode(ctx, &adminpb.SetModeRequest{Mode: spec.ModeAtomics})
	})
	if err == nil || !strings.Contains(err.Error(), "NIC") || !strings.Contains(err.Error(), "cannot run under HA") {
		t.Fatalf("SetMode(atomics) on an HA leader = %v; want a refusal that says why", err)
	}
	servedIn(t, ps, spec.ModeSpecS0, 0)
}
