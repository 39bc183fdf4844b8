package admin_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// TestSessionLease: a session that is not renewed is disconnected once
// its lease runs out; one renewed by KeepAlive stays; KeepAlive reports
// the expired one (and a disconnected one) as unknown, and refuses bare IDs.
func TestSessionLease(t *testing.T) {
	be := admintest.NewBackend(nil)
	// Long enough that a descheduled test (a loaded CI machine) still
	// renews in time: renewals come every ttl/3.
	const ttl = 600 * time.Millisecond
	_, addr := admintest.Start(t, admin.Config{SessionLease: ttl}, be)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addr)
	kept, err := adm.Connect(ctx, admin.ValidConnect())
	if err != nil {
		t.Fatal(err)
	}
	if kept.GetLeaseMs() != uint32(ttl/time.Millisecond) {
		t.Fatalf("lease_ms %d, want %d", kept.GetLeaseMs(), ttl/time.Millisecond)
	}
	req := admin.ValidConnect()
	req.Qps[0].Qpn++
	dead, err := adm.Connect(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if be.Sessions() != 2 {
		t.Fatalf("%d sessions", be.Sessions())
	}
	// Renew one every third of the lease until the other is reclaimed.
	deadline := time.Now().Add(10 * time.Second)
	for be.Sessions() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("dead session not reclaimed: %d sessions", be.Sessions())
		}
		resp, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{kept.GetSessionToken()}})
		if err != nil || len(resp.GetUnknownTokens()) != 0 {
			t.Fatalf("keep-alive: %v %v", resp, err)
		}
		time.Sleep(ttl / 3)
	}
	// Kept a few more leases long.
	for range 6 {
		resp, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{kept.GetSessionToken()}})
		if err != nil || len(resp.GetUnknownTokens()) != 0 {
			t.Fatalf("keep-alive: %v %v", resp, err)
		}
		time.Sleep(ttl / 3)
	}
	if be.Sessions() != 1 {
		t.Fatalf("renewed session reclaimed: %d sessions", be.Sessions())
	}
	resp, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{dead.GetSessionToken(), kept.GetSessionToken()}})
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.GetUnknownTokens(); len(u) != 1 || !bytes.Equal(u[0], dead.GetSessionToken()) {
		t.Fatalf("unknown %x, want [%x]", u, dead.GetSessionToken())
	}
	if _, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{}); err == nil {
		t.Fatal("empty keep-alive accepted")
	}
	// A bare ID is refused: it names no session of its own.
	if _, err := adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionIds: []uint64{kept.GetSessionId()}, Epoch: kept.GetEpoch()}); err == nil {
		t.Fatal("keep-alive by bare ID accepted")
	}
	// Disconnect ends the lease too.
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: kept.GetSessionToken()}); err != nil {
		t.Fatal(err)
	}
	resp, err = adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{kept.GetSessionToken()}})
	if err != nil || len(resp.GetUnknownTokens()) != 1 {
		t.Fatalf("keep-alive after disconnect: %v %v", resp, err)
	}
}
