package client

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// roleBackend is a silentBackend whose Status reports an HA role and
// leader that the test changes.
type roleBackend struct {
	*silentBackend
	mu           sync.Mutex
	role, leader string
	// then: after thenAfter more Status calls, report then instead.
	then      [2]string
	thenAfter int
}

// setLater makes the instance report role and leader after n more
// Status calls.
func (b *roleBackend) setLater(n int, role, leader string) {
	b.mu.Lock()
	b.then, b.thenAfter = [2]string{role, leader}, n
	b.mu.Unlock()
}

// newRole is an instance whose role, and the leader it names, the test
// sets.
func newRole() *roleBackend {
	return &roleBackend{silentBackend: &silentBackend{Backend: admintest.NewBackend(nil)}}
}

// leaderAndStandby starts admin servers over backends a and b, sets their
// roles (ra, rb) to a leading and b a standby naming it, and dials a
// client to both, which connects to a.
func leaderAndStandby(t *testing.T, a, b admin.Backend, ra, rb *roleBackend) (srvA *admin.Server, addrA, addrB string, c *Client) {
	t.Helper()
	cfg := admin.Config{Logger: slog.New(slog.DiscardHandler)}
	srvA, addrA = admintest.Start(t, cfg, a)
	_, addrB = admintest.Start(t, cfg, b)
	ra.set(adminclient.RoleLeader, addrA)
	rb.set(adminclient.RoleStandby, addrA)
	c = dialT(t, addrA+","+addrB, WithQPs(1))
	if ep := c.Endpoint(); ep != addrA {
		t.Fatalf("connected to %s, want the leader %s", ep, addrA)
	}
	return srvA, addrA, addrB, c
}

func (b *roleBackend) set(role, leader string) {
	b.mu.Lock()
	b.role, b.leader = role, leader
	b.mu.Unlock()
}

func (b *roleBackend) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	st, err := b.silentBackend.Status(ctx)
	if st != nil {
		b.mu.Lock()
		if b.then[0] != "" {
			if b.thenAfter--; b.thenAfter < 0 {
				b.role, b.leader, b.then = b.then[0], b.then[1], [2]string{}
			}
		}
		st.Role, st.Leader = b.role, b.leader
		b.mu.Unlock()
	}
	return st, err
}

// TestSlowProbeFollowsMovedLeader: a leader that stops answering (paused)
// while another instance of the group names a new leader is left after
// the first Status probe that times out, not after
// slowProbesBeforeReconnect of them: those would only add to a failover.
func TestSlowProbeFollowsMovedLeader(t *testing.T) {
	a, b := newRole(), newRole()
	_, _, addrB, c := leaderAndStandby(t, a, b, a, b)
	// A is paused: its Status probes time out. B has taken over.
	b.set(adminclient.RoleLeader, addrB)
	before := a.statuses.Load()
	a.slow.Store(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go c.GetTimestamp(ctx) // no answer: the engine probes A
	waitFor(t, func() bool { return len(b.Connects()) >= 1 }, "a Connect to the new leader")
	if n := a.statuses.Load() - before; n >= slowProbesBeforeReconnect {
		t.Fatalf("the client left the paused leader after %d timed-out probes, want fewer than %d: the group named another leader after the first",
			n, slowProbesBeforeReconnect)
	}
}

// TestSlowProbeKeepsLeaderTheGroupNames: a leader slow to answer (busy
// admitting a storm of clients, say) that the rest of the group still
// names keeps its clients' sessions through slowProbesBeforeReconnect-1
// timed-out probes, as without a group.
func TestSlowProbeKeepsLeaderTheGroupNames(t *testing.T) {
	a, b := newRole(), newRole()
	_, _, _, c := leaderAndStandby(t, a, b, a, b)
	before := a.statuses.Load()
	a.slow.Store(slowProbesBeforeReconnect - 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go c.GetTimestamp(ctx)
	waitFor(t, func() bool { return a.statuses.Load()-before >= slowProbesBeforeReconnect+2 }, "probes")
	if n, m := len(a.Connects()), len(b.Connects()); n != 1 || m != 0 {
		t.Fatalf("%d Connects to the leader, %d to the standby after %d slow probes: want 1 and 0 (the session kept)",
			n, m, slowProbesBeforeReconnect-1)
	}
}

// TestGroupChecksBetweenProbes: when the group still names a paused
// leader at its first timed-out probe, the client asks the group again
// before probing the leader a second time, and leaves as soon as the
// group names a successor.
func TestGroupChecksBetweenProbes(t *testing.T) {
	a, b := newRole(), newRole()
	_, _, addrB, c := leaderAndStandby(t, a, b, a, b)
	// A is paused; B still names it when first asked, then takes over.
	b.setLater(1, adminclient.RoleLeader, addrB)
	before := a.statuses.Load()
	a.slow.Store(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go c.GetTimestamp(ctx)
	waitFor(t, func() bool { return len(b.Connects()) >= 1 }, "a Connect to the new leader")
	if n := a.statuses.Load() - before; n != 1 {
		t.Fatalf("the client probed the paused leader %d times before it left, want 1: the group named a successor before a second probe", n)
	}
}
