package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/headeronly"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// startConfig runs seqd in-process with c (ephemeral ports, a temporary
// data directory) and returns its admin address.
func startConfig(t testing.TB, c server.Config) string {
	t.Helper()
	return startAddrs(t, c).Admin
}

// startAddrs is startConfig returning every listener's address. The data
// directory is made before the cleanup that stops seqd is registered, so
// that cleanups (run last-first) stop seqd before they remove it.
func startAddrs(t testing.TB, c server.Config) server.Addrs {
	t.Helper()
	c.Device, c.Admin, c.Data = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	c.Init = true // a fresh data directory: a new deployment
	if c.Metrics == "" {
		c.Metrics = "off"
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, c, quietLogger(), func(a server.Addrs) { addrs <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("seqd: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("seqd did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("seqd not ready after 10s")
	}
	return server.Addrs{}
}

// liveHeap is the Go heap in use after two collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// parallel calls do(i) for every i in [0, n) on workers goroutines, and
// returns the first error; a goroutine stops at its first error.
func parallel(n, workers int, do func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// syntheticConnect is a Connect for a client that exists only on paper:
// one QP at 127.0.0.1:port.
func syntheticConnect(port uint16, qpn uint32, window uint32) *adminpb.ConnectRequest {
	a := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: port}
	ab, _ := a.MarshalBinary()
	return &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{{Address: ab, Qpn: qpn}}, Window: window,
		ClientName: fmt.Sprintf("synthetic-%d", port), ProtocolVersion: spec.ProtocolVersion}
}

// TestAdmissionBeyondCapacity: Connects that would exceed the workers'
// receive capacity, or the session limit, are refused with
// ResourceExhausted and change nothing; a real client admitted before
// keeps being served, and one admitted after a Disconnect frees room is
// served too.
func TestAdmissionBeyondCapacity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One worker with the default receives; windows of 256, from one
	// peer without a receive quota.
	recv := headeronly.DefaultMaxRecv
	tries := recv/256 + 2
	addr := startConfig(t, server.Config{Workers: 1, MaxWindow: 256, MaxClients: tries + 1, PeerMaxRecv: -1}) // one peer fills the worker
	adm := admintest.Client(ctx, t, addr)
	cs := dialN(t, ctx, addr, "", 1) // 2 QPs × 16
	var ids [][]byte
	var refused *adminpb.ConnectRequest
	for i := range tries {
		req := syntheticConnect(uint16(20000+i), 7, 256)
		resp, err := adm.Connect(ctx, req)
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("connect %d: %v, want ResourceExhausted", i, err)
			}
			refused = req
			t.Logf("connect %d refused: %v", i, err)
			break
		}
		ids = append(ids, resp.GetSessionToken())
	}
	if refused == nil {
		t.Fatalf("%d sessions of window 256 admitted on %d receives", tries, recv)
	}
	// 32 receives for the real client: the rest in windows of 256.
	if len(ids) != (recv-32)/256 {
		t.Errorf("%d sessions of window 256 admitted, want %d", len(ids), (recv-32)/256)
	}
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSessions() != uint64(len(ids)+1) {
		t.Errorf("status: %d sessions, want %d", st.GetSessions(), len(ids)+1)
	}
	// The refusal did not overcommit: the real client is served.
	var v verify.History
	if err := load(ctx, cs, 4, 200, &v, nil); err != nil {
		t.Fatalf("admitted client: %v", err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	// A smaller window still fits; after a Disconnect the refused one does.
	if _, err := adm.Connect(ctx, refused); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("repeated connect: %v, want ResourceExhausted", err)
	}
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: ids[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Connect(ctx, refused); err != nil {
		t.Fatalf("connect after a disconnect freed room: %v", err)
	}

	// The session limit: MaxClients.
	addr2 := startConfig(t, server.Config{Workers: 1, MaxWindow: 8, MaxClients: 5})
	adm2 := admintest.Client(ctx, t, addr2)
	for i := range 6 {
		_, err := adm2.Connect(ctx, syntheticConnect(uint16(21000+i), 7, 1))
		switch {
		case i < 5 && err != nil:
			t.Fatalf("connect %d of 5: %v", i, err)
		case i == 5 && status.Code(err) != codes.ResourceExhausted:
			t.Fatalf("connect beyond -max-clients: %v, want ResourceExhausted", err)
		}
	}
}

// TestManyClientsMemory connects 10,000 synthetic clients (2,000 under the
// race detector or -short) to one seqd, each at its own address,
// measures the Go heap per connected client, checks that service
// continues and that disconnecting them all gives the memory back
// (address handles included, after their grace period).
func TestManyClientsMemory(t *testing.T) {
	n := 10000
	if raceEnabled || testing.Short() {
		n = 2000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// One peer (loopback) stands for n client hosts: no admission quotas.
	addr := startConfig(t, server.Config{Workers: 2, MaxWindow: 64, MaxClients: n + 16, PeerMaxSessions: -1, PeerConnectRate: -1, PeerMaxRecv: -1})
	adm := admintest.Client(ctx, t, addr)
	cs := dialN(t, ctx, addr, "", 1)
	var v verify.History
	if err := load(ctx, cs, 2, 100, &v, nil); err != nil {
		t.Fatal(err)
	}
	h0 := liveHeap()
	connectAll := func(base int) [][]byte {
		ids := make([][]byte, n)
		err := parallel(n, 8, func(i int) error {
			// Distinct addresses, as distinct client hosts or ports.
			resp, err := adm.Connect(ctx, syntheticConnect(uint16(base+i), uint32(1+i%1000), 1))
			if err != nil {
				return fmt.Errorf("connect %d: %w", i, err)
			}
			ids[i] = resp.GetSessionToken()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	disconnectAll := func(ids [][]byte) {
		for _, id := range ids {
			if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	ids := connectAll(1024)
	took := time.Since(start)
	h1 := liveHeap()
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSessions() != uint64(n+1) {
		t.Fatalf("%d sessions, want %d", st.GetSessions(), n+1)
	}
	// Still serving, and verified (a verify.History per load: load's times
	// start at its own origin).
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	var v2 verify.History
	if err := load(ctx, cs, 2, 200, &v2, nil); err != nil {
		t.Fatalf("with %d sessions: %v", n, err)
	}
	if err := v2.Check().Err(); err != nil {
		t.Fatal(err)
	}
	disconnectAll(ids)
	per := float64(int64(h1)-int64(h0)) / float64(n)
	// Address handles of departed clients are closed a grace period
	// (1s) after their last QP left, at the next Connect: probe until
	// the heap stops shrinking, with a deadline.
	settle := func() uint64 {
		h, prev := liveHeap(), uint64(0)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && h != prev; {
			time.Sleep(1200 * time.Millisecond) // past the 1s grace
			resp, err := adm.Connect(ctx, syntheticConnect(1023, 1, 1))
			if err != nil {
				t.Fatal(err)
			}
			disconnectAll([][]byte{resp.GetSessionToken()})
			prev, h = h, liveHeap()
			if h > prev-min(prev, 64<<10) {
				break // within 64 KiB of the last probe: settled
			}
		}
		return h
	}
	h2 := settle()
	// Churn: as many clients again, at addresses never seen before.
	disconnectAll(connectAll(1024 + n))
	h3 := settle()
	kept := float64(int64(h2)-int64(h0)) / float64(n)
	growth := float64(int64(h3)-int64(h2)) / float64(n)
	t.Logf("%d synthetic clients connected in %v: heap %d → %d bytes, %.0f bytes per connected client; after disconnecting all %d (%.0f per client kept: maps sized for the peak); after %d more at new addresses came and went %d (%.0f per churned client)",
		n, took.Round(time.Millisecond), h0, h1, per, h2, kept, n, h3, growth)
	// Documented bound (docs: ~per-client state is a session, a peer per
	// QP, a copy in each worker's peer table and a cached address handle).
	if per > 16<<10 {
		t.Errorf("%.0f bytes of heap per connected client, want at most 16 KiB", per)
	}
	if kept >= per {
		t.Errorf("disconnecting gave nothing back: %.0f bytes per client kept, %.0f when connected", kept, per)
	}
	if growth > per/4 {
		t.Errorf("memory grows with churn: %.0f bytes per client that came and went at a new address", growth)
	}
}

// TestLeaseReclaimsDeadClients: with a short session lease, a session
// whose client never renews (a synthetic Connect: a client that died
// right after connecting) is disconnected and its receive capacity given
// back, while a real client that idles for several leases keeps its
// session (the library renews it) and is served without reconnecting.
func TestLeaseReclaimsDeadClients(t *testing.T) {
	// The real client renews at a third of the lease: 1 s leaves its
	// renewals room on a loaded host (at 300 ms a renewal delayed by a
	// busy scheduler lapsed the lease, and the client reconnected).
	const lease = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Sessions of 16 QPs × window 256 (4096 receives each) fill the
	// worker's receives beside the real client's 32.
	big := func(port uint16) *adminpb.ConnectRequest {
		req := syntheticConnect(port, 9, 256)
		for q := range 15 {
			req.Qps = append(req.Qps, &adminpb.Endpoint{Address: req.Qps[0].Address, Qpn: uint32(10 + q)})
		}
		return req
	}
	fill := (headeronly.DefaultMaxRecv - 32) / 4096
	addr := startConfig(t, server.Config{Workers: 1, MaxWindow: 256, MaxClients: 64, SessionLease: lease, PeerMaxRecv: -1}) // one peer fills the worker
	adm := admintest.Client(ctx, t, addr)
	cs := dialN(t, ctx, addr, "", 1)
	var dead [][]byte
	for i := range fill {
		resp, err := adm.Connect(ctx, big(uint16(22000+i)))
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		if resp.GetLeaseMs() != uint32(lease/time.Millisecond) {
			t.Fatalf("lease_ms %d", resp.GetLeaseMs())
		}
		dead = append(dead, resp.GetSessionToken())
	}
	if _, err := adm.Connect(ctx, big(23000)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("full server: %v, want ResourceExhausted", err)
	}
	sessions := func() uint64 { return sessionCount(ctx, t, adm) }
	waitFor(t, 20*lease, func() bool { return sessions() == 1 }, "dead sessions reclaimed")
	// Their capacity is back.
	if _, err := adm.Connect(ctx, big(23000)); err != nil {
		t.Fatalf("connect after reclaim: %v", err)
	}
	// The real client idles through five more leases (the idle period is
	// what is under test) and still holds its session.
	before := cs[0].Stats().Reconnects
	time.Sleep(5 * lease)
	// The synthetic session connected after the reclaim lapsed too; the
	// real client's is the one left.
	if n := sessions(); n != 1 {
		t.Fatalf("%d sessions after the real client idled, want 1", n)
	}
	var v verify.History
	if err := load(ctx, cs, 2, 200, &v, nil); err != nil {
		t.Fatal(err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	if r := cs[0].Stats().Reconnects; r != before {
		t.Errorf("the renewing client reconnected %d times", r-before)
	}
	for _, id := range dead {
		if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: id}); status.Code(err) != codes.NotFound {
			t.Errorf("disconnect of reclaimed session %x: %v, want NotFound", id, err)
		}
	}
}

// TestLeaseReclaimsDeadClientsHA: the leader of an HA group (one seqd on
// a real etcd) reclaims the sessions of clients that stopped renewing, as
// a single seqd does. Skipped without etcd.
func TestLeaseReclaimsDeadClientsHA(t *testing.T) {
	const lease = 300 * time.Millisecond
	etcd := hatest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := startConfig(t, server.Config{Workers: 1, MaxWindow: 256, MaxClients: 8, SessionLease: lease,
		HA: server.HAConfig{EtcdEndpoints: strings.Join(etcd.Endpoints(), ","), LeaseTTL: time.Second}})
	adm := admintest.Client(ctx, t, addr)
	// Until this instance has won its term, Connect redirects.
	var first *adminpb.ConnectResponse
	waitFor(t, 20*time.Second, func() bool {
		resp, err := adm.Connect(ctx, syntheticConnect(24000, 9, 256))
		first = resp
		return err == nil
	}, "leadership")
	if first.GetLeaseMs() != uint32(lease/time.Millisecond) {
		t.Fatalf("lease_ms %d, want %d", first.GetLeaseMs(), lease/time.Millisecond)
	}
	for i := range 3 {
		if _, err := adm.Connect(ctx, syntheticConnect(uint16(24001+i), 9, 256)); err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
	}
	sessions := func() uint64 { return sessionCount(ctx, t, adm) }
	if n := sessions(); n != 4 {
		t.Fatalf("%d sessions, want 4", n)
	}
	waitFor(t, 20*lease, func() bool { return sessions() == 0 }, "dead sessions reclaimed by the leader")
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionToken: first.GetSessionToken()}); status.Code(err) != codes.NotFound {
		t.Errorf("disconnect of a reclaimed session: %v, want NotFound", err)
	}
}

// sessionCount is the number of sessions the server's Status reports.
func sessionCount(ctx context.Context, t *testing.T, adm adminpb.AdminClient) uint64 {
	t.Helper()
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.GetSessions()
}
