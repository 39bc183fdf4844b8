package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/server"
)

// startSeqd runs an in-process seqd on loopback and returns its admin
// address; it stops at the end of the test.
func startSeqd(t *testing.T, c server.Config) string {
	t.Helper()
	c.Device, c.Admin, c.Metrics, c.Data, c.Init = "127.0.0.1:0", "127.0.0.1:0", "off", t.TempDir(), true
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, c, slog.New(slog.DiscardHandler), func(a server.Addrs) { ready <- a }) }()
	select {
	case a := <-ready:
		t.Cleanup(func() { cancel(); <-done })
		return a.Admin
	case err := <-done:
		cancel()
		t.Fatalf("seqd: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("seqd did not start in 30s")
	}
	return ""
}

// loadgen -admin takes the address list seqctl takes: with a dead member
// and a standby listed first it drives the group's leader, switching it
// to the mode asked for.
func TestAdminList(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and an HA group; skipped in -short")
	}
	c := hatest.Start(t, 1)
	ha := server.HAConfig{EtcdEndpoints: strings.Join(c.Endpoints(), ","), EtcdPrefix: "/loadgen-list", LeaseTTL: time.Second}
	a := startSeqd(t, server.Config{HA: ha})
	b := startSeqd(t, server.Config{HA: ha})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The leader, and a standby that names it.
	var lead, standby string
	for lead == "" {
		for _, addr := range []string{a, b} {
			cc, err := adminclient.Dial(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
			cc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if st.GetRole() == adminclient.RoleStandby && st.GetLeader() != "" {
				lead, standby = st.GetLeader(), addr
			}
		}
		if lead == "" {
			if ctx.Err() != nil {
				t.Fatal("no standby naming a leader within 30s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	list := dead + "," + standby + "," + lead
	args := []string{"-admin", list, "-modes", "herd", "-duration", "300ms", "-warmup", "100ms", "-echo", "-1s", "-quiet"}
	var out, errb bytes.Buffer
	if code := realMain(args, &out, &errb); code != 0 {
		t.Fatalf("loadgen %q: exit %d\n%s\n%s", args, code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "herd") {
		t.Errorf("loadgen %q: no herd row in\n%s", args, out.String())
	}
	cc, err := adminclient.Dial(ctx, lead)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{}); err != nil || st.GetMode() != "herd" || st.GetRole() != adminclient.RoleLeader {
		t.Fatalf("leader %s after loadgen: %v %v, want it leading in herd", lead, st, err)
	}
}
