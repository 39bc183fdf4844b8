package client

import (
	"log/slog"
	"testing"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/admintest"
)

// TestIdleSessionFollowsLostLeader: a client with no call in flight
// whose leader goes away (its admin server closes the connection, as a
// kill -9 does) reconnects to the successor at once, without waiting for
// its next call to find the session gone: after a failover every session
// is connected again before it next calls.
func TestIdleSessionFollowsLostLeader(t *testing.T) {
	newRole := func() *roleBackend {
		return &roleBackend{silentBackend: &silentBackend{Backend: admintest.NewBackend(nil)}}
	}
	a, b := newRole(), newRole()
	cfg := admin.Config{Logger: slog.New(slog.DiscardHandler)}
	srvA, addrA := admintest.Start(t, cfg, a)
	_, addrB := admintest.Start(t, cfg, b)
	a.set(adminclient.RoleLeader, addrA)
	b.set(adminclient.RoleStandby, addrA)
	c := dialT(t, addrA+","+addrB, WithQPs(1))
	if ep := c.Endpoint(); ep != addrA {
		t.Fatalf("connected to %s, want the leader %s", ep, addrA)
	}
	// A dies; B takes over. The client makes no call.
	b.set(adminclient.RoleLeader, addrB)
	srvA.Stop()
	waitFor(t, func() bool { return len(b.Connects()) >= 1 }, "an idle client's Connect to the new leader")
	waitFor(t, func() bool { return c.Endpoint() == addrB }, "the client connected to the new leader")
}
