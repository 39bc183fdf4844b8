package adminclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

func TestParseAddrs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string // in the error when not ""
	}{
		{in: "127.0.0.1:7070", want: []string{"127.0.0.1:7070"}},
		{in: "a:1,b:2,c:3", want: []string{"a:1", "b:2", "c:3"}},
		{in: " a:1 , b:2 ", want: []string{"a:1", "b:2"}},
		{in: "a:1,b:2,a:1", want: []string{"a:1", "b:2"}},
		{in: "[::1]:7070,[2001:db8::1]:7071", want: []string{"[::1]:7070", "[2001:db8::1]:7071"}},
		{in: "seqd-0.seqd:7070,10.0.0.2:7070", want: []string{"seqd-0.seqd:7070", "10.0.0.2:7070"}},
		{in: "", err: "empty address list"},
		{in: " ", err: "empty address list"},
		{in: "a:1,,b:2", err: "empty address"},
		{in: "a:1,", err: "entry 2"},
		{in: "::1:7070", err: "in brackets"},
		{in: "a:1,2001:db8::1:7070", err: "in brackets"},
		{in: "nohostport", err: `"nohostport": want host:port`},
		{in: "host:", err: "with a port"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := adminclient.ParseAddrs(tc.in)
			if tc.err != "" {
				if !errors.Is(err, adminclient.ErrAddress) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseAddrs(%q) = %q, %v; want an ErrAddress with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("ParseAddrs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// Dial takes one address: a list or a malformed address is an ErrAddress
// that says so, not a plaintext refusal that calls it "not a loopback
// address".
func TestDialRefusesList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range []string{"127.0.0.1:7070,127.0.0.1:7071", "::1:7070", "nohostport"} {
		_, err := adminclient.Dial(ctx, addr)
		if !errors.Is(err, adminclient.ErrAddress) || errors.Is(err, adminclient.ErrPlaintextRefused) ||
			strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("Dial(%q) = %v, want ErrAddress", addr, err)
		}
	}
}

// fakeMember is one instance of a fake HA group: its Status names the
// group's leader, and the calls only a leader serves (SetMode here)
// answer a standby's NOT_LEADER redirect.
type fakeMember struct {
	adminpb.UnimplementedAdminServer
	g    *fakeGroup
	addr string
}

type fakeGroup struct {
	mu     sync.Mutex
	leader string         // "" when none is known
	served map[string]int // SetModes served, by member
	// elect, when set, is called under mu on each Status: an election
	// that ends while a caller asks.
	elect    func(statuses int)
	statuses int
}

func (m *fakeMember) Status(context.Context, *adminpb.StatusRequest) (*adminpb.StatusResponse, error) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	m.g.statuses++
	if m.g.elect != nil {
		m.g.elect(m.g.statuses)
	}
	role := adminclient.RoleStandby
	if m.g.leader == m.addr {
		role = adminclient.RoleLeader
	}
	return &adminpb.StatusResponse{Role: role, Leader: m.g.leader}, nil
}

func (m *fakeMember) SetMode(_ context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.g.leader != m.addr {
		return nil, adminclient.RedirectError(m.g.leader)
	}
	m.g.served[m.addr]++
	return &adminpb.SetModeResponse{Mode: req.GetMode()}, nil
}

// startGroup serves n fake members on loopback and returns their
// addresses; leader (an index, or -1 for none) leads.
func startGroup(t *testing.T, n, leader int) (*fakeGroup, []string) {
	t.Helper()
	g := &fakeGroup{served: map[string]int{}}
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		adminpb.RegisterAdminServer(srv, &fakeMember{g: g, addr: lis.Addr().String()})
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	if leader >= 0 {
		g.leader = addrs[leader]
	}
	return g, addrs
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := lis.Addr().String()
	lis.Close()
	return a
}

func setModeOn(ctx context.Context, calls *[]string) func(string, *grpc.ClientConn) error {
	return func(addr string, cc *grpc.ClientConn) error {
		*calls = append(*calls, addr)
		_, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"})
		return err
	}
}

// Leader skips a dead member, follows the standby's redirect, and the
// leader alone serves the call.
func TestGroupLeaderFollowsRedirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, addrs := startGroup(t, 3, 2)
	dead := deadAddr(t)
	grp, err := adminclient.NewGroup(strings.Join([]string{dead, addrs[0], addrs[1], addrs[2]}, ","))
	if err != nil {
		t.Fatal(err)
	}
	var redirects []string
	grp.Redirected = func(from, to string) { redirects = append(redirects, from+"->"+to) }
	var calls []string
	at, err := grp.Leader(ctx, setModeOn(ctx, &calls))
	if err != nil || at != addrs[2] {
		t.Fatalf("Leader = %s, %v; want %s", at, err, addrs[2])
	}
	if want := []string{addrs[0], addrs[2]}; strings.Join(calls, " ") != strings.Join(want, " ") {
		t.Errorf("called %q, want %q (the first live member, then the leader it names)", calls, want)
	}
	if len(redirects) != 1 || redirects[0] != addrs[0]+"->"+addrs[2] {
		t.Errorf("redirects %q", redirects)
	}
	if g.served[addrs[2]] != 1 || len(g.served) != 1 {
		t.Errorf("served %v, want one SetMode on the leader %s", g.served, addrs[2])
	}

	// The leader need not be listed: the redirect names it.
	grp.Addrs = []string{addrs[1]}
	calls = nil
	if at, err := grp.Leader(ctx, setModeOn(ctx, &calls)); err != nil || at != addrs[2] {
		t.Fatalf("Leader via an unlisted leader = %s, %v", at, err)
	}

	// DialLeader finds it by Status.
	a, cc, err := grp.DialLeader(ctx)
	if err != nil || a != addrs[2] {
		t.Fatalf("DialLeader = %s, %v; want %s", a, err, addrs[2])
	}
	cc.Close()
}

// With no leader known every member answers a redirect: Leader returns
// it, and DialLeader says no member leads.
func TestGroupNoLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, addrs := startGroup(t, 2, -1)
	grp := &adminclient.Group{Addrs: addrs}
	var calls []string
	_, err := grp.Leader(ctx, setModeOn(ctx, &calls))
	if l, ok := adminclient.LeaderFromError(err); !ok || l != "" {
		t.Fatalf("Leader with no leader = %v, want a redirect naming none", err)
	}
	if len(calls) != 2 {
		t.Errorf("called %q, want both members", calls)
	}
	// DialLeader waits out an election until its context ends, then
	// says why it found no leader.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, _, err := grp.DialLeader(short); err == nil || !strings.Contains(err.Error(), "knows no leader") {
		t.Fatalf("DialLeader with no leader = %v", err)
	}
}

// DialLeader started while the group elects waits for the leader, as a
// loadgen started during a failover must, instead of failing on the
// first round in which every member is a standby that knows no leader.
func TestDialLeaderWaitsOutElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, addrs := startGroup(t, 3, -1)
	g.elect = func(n int) {
		if n == 7 { // in the third round: two found no leader
			g.leader = addrs[1]
		}
	}
	a, cc, err := (&adminclient.Group{Addrs: addrs}).DialLeader(ctx)
	if err != nil || a != addrs[1] {
		t.Fatalf("DialLeader during an election = %s, %v; want the elected %s", a, err, addrs[1])
	}
	cc.Close()
}

// A group none of whose members answers is not electing: DialLeader
// fails at once, not at its context's end.
func TestDialLeaderDeadGroupFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grp := &adminclient.Group{Addrs: []string{deadAddr(t), deadAddr(t)}}
	done := make(chan error, 1)
	go func() { _, _, err := grp.DialLeader(ctx); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("DialLeader to dead members succeeded")
		}
	case <-ctx.Done():
		t.Fatal("DialLeader to dead members waited for its context: it took them for an election")
	}
}

// Any asks the first member that answers; the loopback check applies to
// each address of the list, and a refusal names the one address refused.
func TestGroupAnyPerAddressLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, addrs := startGroup(t, 1, 0)
	off := "198.51.100.1:7070" // TEST-NET-2: never dialled, refused first
	grp, err := adminclient.NewGroup(off + "," + addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	at, err := grp.Any(ctx, func(string, *grpc.ClientConn) error { return nil })
	if err != nil || at != addrs[0] {
		t.Fatalf("Any = %s, %v; want the loopback member %s", at, err, addrs[0])
	}
	grp, _ = adminclient.NewGroup(off + ",198.51.100.2:7070")
	_, err = grp.Any(ctx, func(string, *grpc.ClientConn) error { return nil })
	if !errors.Is(err, adminclient.ErrPlaintextRefused) {
		t.Fatalf("Any off loopback = %v, want ErrPlaintextRefused", err)
	}
	for _, a := range []string{off, "198.51.100.2:7070"} {
		if !strings.Contains(err.Error(), a+" is not a loopback address") {
			t.Errorf("error %q does not refuse %s by itself", err, a)
		}
	}
	if strings.Contains(err.Error(), off+",198.51.100.2:7070 is not") {
		t.Errorf("error %q calls the list an address", err)
	}
}

// A member's answer, an error included, is the result: Any does not try
// the next member then.
func TestGroupAnyReturnsAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, addrs := startGroup(t, 2, 0)
	grp := &adminclient.Group{Addrs: addrs}
	boom := fmt.Errorf("boom")
	var calls int
	at, err := grp.Any(ctx, func(string, *grpc.ClientConn) error { calls++; return boom })
	if err != boom || at != addrs[0] || calls != 1 {
		t.Fatalf("Any = %s, %v after %d calls", at, err, calls)
	}
}
