package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/server"
)

// TestDefaultMaxClients fills a seqd with its default -max-clients
// (server.DefaultMaxClients) synthetic sessions at window 1, on one worker
// and without leases, measures the heap per session, and checks that
// one more is refused with ResourceExhausted. Under the race detector
// or -short it does the same with -max-clients 2048.
func TestDefaultMaxClients(t *testing.T) {
	// One peer (loopback) opens every session as fast as it can: no
	// admission quotas.
	n, cfg := server.DefaultMaxClients, server.Config{Workers: 1, SessionLease: -1, PeerMaxSessions: -1, PeerConnectRate: -1, PeerMaxRecv: -1}
	if raceEnabled || testing.Short() {
		n, cfg.MaxClients = 2048, 2048
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	adm := admintest.Client(ctx, t, startConfig(t, cfg))
	h0 := liveHeap()
	start := time.Now()
	err := parallel(n, 8, func(i int) error {
		// Distinct (address, QPN) per session: 1024 ports × QPNs.
		_, err := adm.Connect(ctx, syntheticConnect(uint16(30000+i%1024), uint32(1+i/1024), 1))
		return err
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	took := time.Since(start)
	h1 := liveHeap()
	per := float64(int64(h1)-int64(h0)) / float64(n)
	t.Logf("%d sessions connected in %v: heap %d → %d bytes, %.0f bytes per session", n, took.Round(time.Millisecond), h0, h1, per)
	_, err = adm.Connect(ctx, syntheticConnect(29999, 1, 1))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("session %d of -max-clients %d: %v, want ResourceExhausted", n+1, n, err)
	}
	// The documented figure (README, docs/operations.md "Many clients")
	// is about 1 KiB per session; fail well above it.
	if per > 4<<10 {
		t.Errorf("%.0f bytes of heap per session, want at most 4 KiB", per)
	}
}
