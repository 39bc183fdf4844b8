package haserve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/haserve"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type instance struct {
	srv    *haserve.Server
	dev    verbs.Device
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, eps []string) *instance {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node, err := ha.New(ha.Config{Endpoints: eps, Prefix: "/haserve", Advertise: lis.Addr().String(), Logger: quiet, Init: true})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open("soft", "127.0.0.1:0", verbs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := haserve.New(haserve.Config{Node: node, Modes: modes.Config{Device: dev, Logger: quiet}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(admin.Config{Logger: quiet}, srv)
	if err != nil {
		t.Fatal(err)
	}
	go adm.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{srv: srv, dev: dev, addr: lis.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go func() { defer close(in.done); srv.Run(ctx) }()
	t.Cleanup(func() { in.stop(); adm.Stop(); node.Close(); dev.Close() })
	return in
}

func (in *instance) stop() { in.cancel(); <-in.done }

func waitLeader(t *testing.T, ins ...*instance) *instance {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, in := range ins {
			if in.srv.IsLeader() {
				return in
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader within 10s")
	return nil
}

// TestRedirectAndFailover: the standby redirects Connect to the leader;
// a client of the leader gets values; after the leader stops, the standby
// serves values above every earlier one.
func TestRedirectAndFailover(t *testing.T) {
	c := hatest.Start(t, 1)
	a, b := start(t, c.Endpoints()), start(t, c.Endpoints())
	lead := waitLeader(t, a, b)
	standby := a
	if lead == a {
		standby = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cc, err := adminclient.Dial(ctx, standby.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// The standby learns the leader from etcd a moment after the leader
	// wins; until then it answers "leader unknown, retry".
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err = adminpb.NewAdminClient(cc).Connect(ctx, &adminpb.ConnectRequest{
			Qps: []*adminpb.Endpoint{{Address: make([]byte, 20), Qpn: 5}}, Window: 4, ProtocolVersion: spec.ProtocolVersion})
		l, ok := adminclient.LeaderFromError(err)
		if ok && l == lead.addr {
			break
		}
		if (ok && l != "") || time.Now().After(deadline) {
			t.Fatalf("standby Connect = %v; want a redirect to %s", err, lead.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}

	get := func(addr string) uint64 {
		cl, err := client.Dial(ctx, addr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithLogger(quiet), client.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		defer cl.Close()
		var last uint64
		for range 100 {
			ts, err := cl.GetTimestamp(ctx)
			if err != nil {
				t.Fatalf("GetTimestamp from %s: %v", addr, err)
			}
			if uint64(ts) <= last {
				t.Fatalf("%d after %d", ts, last)
			}
			last = uint64(ts)
		}
		return last
	}
	v1 := get(lead.addr)
	// The client library follows the standby's redirect to the leader.
	if v := get(standby.addr); v <= v1 {
		t.Fatalf("via the standby's redirect got %d, not above %d", v, v1)
	} else {
		v1 = v
	}
	lead.stop() // resigns: the standby wins at once
	next := waitLeader(t, standby)
	v2 := get(next.addr)
	if v2 <= v1 {
		t.Fatalf("after failover got %d, not above %d", v2, v1)
	}
}

// TestClientFollowsTransfer: a client connected to the leader, knowing
// both instances, keeps getting increasing values across a leader
// transfer without being dialed again: it notices the old leader is a
// standby now, follows the redirect and resends its calls.
func TestClientFollowsTransfer(t *testing.T) {
	c := hatest.Start(t, 1)
	a, b := start(t, c.Endpoints()), start(t, c.Endpoints())
	lead := waitLeader(t, a, b)
	standby := a
	if lead == a {
		standby = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, lead.addr, client.WithEndpoints(standby.addr), client.WithDevice("soft", "127.0.0.1:0", ""),
		client.WithLogger(quiet), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if cl.Endpoint() != lead.addr {
		t.Fatalf("client connected to %s, want the leader %s", cl.Endpoint(), lead.addr)
	}
	var last uint64
	get := func(n int) {
		for range n {
			ts, err := cl.GetTimestamp(ctx)
			if err != nil {
				t.Fatalf("GetTimestamp: %v", err)
			}
			if uint64(ts) <= last {
				t.Fatalf("%d after %d", ts, last)
			}
			last = uint64(ts)
		}
	}
	get(100)
	resp, err := lead.srv.TransferLeader(ctx)
	if err != nil {
		t.Fatalf("TransferLeader: %v", err)
	}
	if resp.GetLeader() != standby.addr || resp.GetPreviousLeader() != lead.addr {
		t.Fatalf("TransferLeader = %v, want %s -> %s", resp, lead.addr, standby.addr)
	}
	get(100)
	if cl.Endpoint() != standby.addr || cl.Stats().Reconnects == 0 {
		t.Fatalf("after the transfer the client uses %s (%d reconnects), want the new leader %s",
			cl.Endpoint(), cl.Stats().Reconnects, standby.addr)
	}
	if cl.Stats().Regressions != 0 {
		t.Fatalf("%d regressions", cl.Stats().Regressions)
	}
}

// heldStatus is an instance's backend that starts the instance's
// campaign when the first Status reaches it.
type heldStatus struct {
	*haserve.Server
	arrived chan struct{}
}

func (h *heldStatus) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	h.arrive()
	return h.Server.Status(ctx)
}

func (h *heldStatus) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	h.arrive()
	return h.Server.Connect(ctx, req)
}

func (h *heldStatus) arrive() {
	select {
	case h.arrived <- struct{}{}:
	default:
	}
}

// TestStatusHeldWhileElecting: a Status that reaches an instance while
// the group has no serving leader (here: this instance's campaign starts
// as the call arrives) is held until the instance serves, and answers as
// the leader: a client looking for the leader after a failover learns it
// with one call, instead of retrying with growing pauses.
func TestStatusHeldWhileElecting(t *testing.T) {
	heldWhileElecting(t, func(ctx context.Context, adm adminpb.AdminClient) error {
		st, err := adm.Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			return err
		}
		if st.GetRole() != adminclient.RoleLeader {
			return fmt.Errorf("Status during the election answered role %q (leader %q); want it held until this instance leads", st.GetRole(), st.GetLeader())
		}
		return nil
	})
}

// TestConnectHeldWhileElecting: a Connect that reaches the leader-elect
// before it serves is held until it does, and admitted, not turned away
// to retry after a pause.
func TestConnectHeldWhileElecting(t *testing.T) {
	heldWhileElecting(t, func(ctx context.Context, adm adminpb.AdminClient) error {
		client := handshake.Endpoint{Addr: verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: 9}, QPN: 7}
		resp, err := adm.Connect(ctx, handshake.EncodeAdmission(handshake.Admission{Name: "held", Window: 4,
			QPs: []handshake.Endpoint{client}}, spec.ModeSpecS0))
		if err != nil {
			return fmt.Errorf("Connect during the election: %w; want it held until this instance leads", err)
		}
		if resp.GetSessionId() == 0 {
			return fmt.Errorf("Connect answered %v", resp)
		}
		return nil
	})
}

// heldWhileElecting starts one instance whose campaign begins when the
// first Status or Connect reaches it, makes call there, and fails the
// test with call's error.
func heldWhileElecting(t *testing.T, call func(context.Context, adminpb.AdminClient) error) {
	c := hatest.Start(t, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node, err := ha.New(ha.Config{Endpoints: c.Endpoints(), Prefix: "/held", Advertise: lis.Addr().String(), Logger: quiet, Init: true})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open("soft", "127.0.0.1:0", verbs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A hold longer than any campaign on a loaded machine: the answer
	// comes when the instance serves.
	srv, err := haserve.New(haserve.Config{Node: node, Modes: modes.Config{Device: dev, Logger: quiet}, Logger: quiet, StatusHold: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := &heldStatus{Server: srv, arrived: make(chan struct{}, 1)}
	adm, err := admin.New(admin.Config{Logger: quiet}, h)
	if err != nil {
		t.Fatal(err)
	}
	go adm.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; adm.Stop(); node.Close(); dev.Close() })
	go func() {
		defer close(done)
		select {
		case <-h.arrived:
			srv.Run(ctx)
		case <-ctx.Done():
		}
	}()

	cc, err := adminclient.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := call(sctx, adminpb.NewAdminClient(cc)); err != nil {
		t.Fatal(err)
	}
}
