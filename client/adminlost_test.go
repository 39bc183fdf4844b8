package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// TestIdleSessionFollowsLostLeader: a client with no call in flight
// whose leader goes away (its admin server closes the connection, as a
// kill -9 does) reconnects to the successor at once, without waiting for
// its next call to find the session gone: after a failover every session
// is connected again before it next calls.
func TestIdleSessionFollowsLostLeader(t *testing.T) {
	a, b := newRole(), newRole()
	srvA, _, addrB, c := leaderAndStandby(t, a, b, a, b)
	// A dies; B takes over. The client makes no call.
	b.set(adminclient.RoleLeader, addrB)
	srvA.Stop()
	waitFor(t, func() bool { return len(b.Connects()) >= 1 }, "an idle client's Connect to the new leader")
	waitFor(t, func() bool { return c.Endpoint() == addrB }, "the client connected to the new leader")
}

// slowLeader is a new leader in a failover storm: its first Status is
// held (the group is electing it), its first Connect queued behind
// others; both answer in the end.
type slowLeader struct {
	*roleBackend
	statusDelay, connectDelay atomic.Int64 // nanoseconds, once each
}

func (b *slowLeader) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	if d := time.Duration(b.statusDelay.Swap(0)); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	return b.roleBackend.Status(ctx)
}

func (b *slowLeader) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if d := time.Duration(b.connectDelay.Swap(0)); d > 0 {
		time.Sleep(d) // the work is under way: the caller's deadline does not stop it
	}
	return b.roleBackend.Connect(ctx, req)
}

// TestReconnectWaitsForLiveLeadersConnect: after a failover, a Connect to
// the new leader that just answered the Status before it (held while the
// group elected it) has a try of its own, admitTry, rather than what the
// Status left of the probe's 500 ms. Before, the client gave up on the
// Connect, the leader admitted the session all the same, and the client
// asked again: in the HA storm a third of the new leader's Connects were
// such waste, and their clients were served last. Base failed with "the
// new leader admitted 2 sessions for one reconnect".
func TestReconnectWaitsForLiveLeadersConnect(t *testing.T) {
	a, b := newRole(), &slowLeader{roleBackend: newRole()}
	srvA, _, addrB, c := leaderAndStandby(t, a, b, a, b.roleBackend)
	// A dies; B is elected; its Status is held 350 ms and its Connect
	// takes 300 ms: together more than the probe's 500 ms.
	b.set(adminclient.RoleLeader, addrB)
	b.statusDelay.Store(int64(350 * time.Millisecond))
	b.connectDelay.Store(int64(300 * time.Millisecond))
	srvA.Stop()
	waitFor(t, func() bool { return c.Stats().Reconnects >= 1 }, "the client reconnected")
	if ep := c.Endpoint(); ep != addrB {
		t.Fatalf("reconnected to %s, want the new leader %s", ep, addrB)
	}
	if n := len(b.Connects()); n != 1 {
		t.Errorf("the new leader admitted %d sessions for one reconnect, want 1", n)
	}
}
