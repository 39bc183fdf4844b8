package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/spec"
)

// A fake HA group behind real admin servers: each member's Status names
// the group's leader, and the calls only a leader serves answer a
// standby's NOT_LEADER redirect, as haserve's do.
type fakeGroup struct {
	mu        sync.Mutex
	leader    string
	members   []string
	setModes  map[string]int // served, by member
	transfers map[string]int
}

type fakeMember struct {
	*admintest.Backend
	g    *fakeGroup
	addr string
}

func (m *fakeMember) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	st, err := m.Backend.Status(ctx)
	if err != nil {
		return nil, err
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	st.Role, st.Leader = adminclient.RoleStandby, m.g.leader
	if m.g.leader == m.addr {
		st.Role = adminclient.RoleLeader
	}
	return st, nil
}

func (m *fakeMember) SetMode(_ context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.g.leader != m.addr {
		return nil, adminclient.RedirectError(m.g.leader)
	}
	m.g.setModes[m.addr]++
	return &adminpb.SetModeResponse{Previous: spec.ModeSpecS0, Mode: req.GetMode(), High: 10, Epoch: 4}, nil
}

func (m *fakeMember) TransferLeader(context.Context) (*adminpb.TransferLeaderResponse, error) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.g.leader != m.addr {
		return nil, adminclient.RedirectError(m.g.leader)
	}
	m.g.transfers[m.addr]++
	for _, o := range m.g.members {
		if o != m.addr {
			m.g.leader = o
			break
		}
	}
	return &adminpb.TransferLeaderResponse{PreviousLeader: m.addr, Leader: m.g.leader}, nil
}

// startFakeGroup runs n members, the last one leading, and returns the
// group and the -admin list: a dead address first, then the members.
func startFakeGroup(t *testing.T, n int) (*fakeGroup, string) {
	t.Helper()
	g := &fakeGroup{setModes: map[string]int{}, transfers: map[string]int{}}
	for range n {
		m := &fakeMember{Backend: admintest.NewBackend(testStatus), g: g}
		_, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler)}, m)
		m.addr = addr
		g.members = append(g.members, addr)
	}
	g.leader = g.members[n-1]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	return g, dead + "," + strings.Join(g.members, ",")
}

// status and health take the list and ask the first member that
// answers; a standby answers for itself.
func TestListReadOnly(t *testing.T) {
	g, list := startFakeGroup(t, 3)
	code, out, errs := seqctl("-admin", list, "status")
	if code != exitOK || !matches(`address +`+g.members[0]+`\n`, out) || !matches(`role +standby\n`, out) ||
		!matches(`leader +`+g.leader+`\n`, out) {
		t.Fatalf("status -admin %s = %d\n%s%s", list, code, out, errs)
	}
	code, out, errs = seqctl("-admin", list, "status", "-o", "json")
	var st adminpb.StatusResponse
	if code != exitOK || protojson.Unmarshal([]byte(out), &st) != nil || st.GetRole() != adminclient.RoleStandby {
		t.Fatalf("status -o json -admin %s = %d\n%s%s", list, code, out, errs)
	}
	if code, out, errs := seqctl("-admin", list, "health"); code != exitOK || out != "SERVING\n" {
		t.Fatalf("health -admin %s = %d %q %q", list, code, out, errs)
	}
}

// set-mode and transfer-leader given the list reach the leader through
// the standby's redirect; the standbys serve nothing.
func TestListMutatingFollowsLeader(t *testing.T) {
	g, list := startFakeGroup(t, 3)
	lead := g.leader
	code, out, errs := seqctl("-admin", list, "set-mode", "herd")
	if code != exitOK || !strings.Contains(out, "mode "+spec.ModeSpecS0+" -> "+spec.ModeHERD) {
		t.Fatalf("set-mode -admin %s = %d %q %q", list, code, out, errs)
	}
	if !strings.Contains(errs, g.members[0]+" is a standby; the leader is "+lead) {
		t.Errorf("set-mode stderr %q does not say it followed the redirect", errs)
	}
	if len(g.setModes) != 1 || g.setModes[lead] != 1 {
		t.Errorf("set-mode served by %v, want once by the leader %s", g.setModes, lead)
	}
	code, out, errs = seqctl("-admin", list, "transfer-leader")
	if code != exitOK || out != fmt.Sprintf("leader %s -> %s\n", lead, g.members[0]) {
		t.Fatalf("transfer-leader -admin %s = %d %q %q", list, code, out, errs)
	}
	if len(g.transfers) != 1 || g.transfers[lead] != 1 {
		t.Errorf("transfers %v, want one by %s", g.transfers, lead)
	}
}

// A malformed list is a usage error that names the bad entry; off
// loopback each address is refused by itself, with what to pass.
func TestListBadAddresses(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"127.0.0.1:7070,,127.0.0.1:7071", "empty address"},
		{"::1:7070", "in brackets"},
		{"127.0.0.1:7070,nohostport", `"nohostport": want host:port`},
	} {
		for _, cmd := range []string{"status", "health", "set-mode", "transfer-leader", "members"} {
			args := []string{"-admin", tc.list, cmd}
			if cmd == "set-mode" {
				args = append(args, "herd")
			}
			code, _, errs := seqctl(args...)
			if code != exitUsage || !strings.Contains(errs, tc.want) || strings.Contains(errs, "loopback") {
				t.Errorf("seqctl %q = %d %q, want a usage error with %q", args, code, errs, tc.want)
			}
		}
	}
	list := "198.51.100.1:7070,198.51.100.2:7070"
	for _, cmd := range []string{"status", "health", "transfer-leader"} {
		code, _, errs := seqctl("-admin", list, cmd)
		if code != exitFail || strings.Contains(errs, list+" is not") ||
			!strings.Contains(errs, "198.51.100.1:7070 is not a loopback address") ||
			!strings.Contains(errs, "198.51.100.2:7070 is not a loopback address") || !strings.Contains(errs, "-insecure") {
			t.Errorf("%s -admin %s = %d %q, want each address refused by itself", cmd, list, code, errs)
		}
	}
}
