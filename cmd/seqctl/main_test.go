package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/spec"
)

var testStatus = &adminpb.StatusResponse{
	Version:       "v0.1.0-test",
	Mode:          spec.ModeSpecS0,
	Format:        "counter",
	Current:       1_000_000,
	PersistedMark: 1_500_000,
	Served:        42,
	Epoch:         3,
	Workers: []*adminpb.WorkerStatus{
		{Id: 0, Core: 2, Batches: 10, Requests: 40, AvgBatch: 4, Drops: 1},
		{Id: 1, Core: -1, Batches: 1, Requests: 2, AvgBatch: 2},
	},
	ProviderCounters: map[string]uint64{"rx_packets": 7, "icrc_errors": 0},
}

// startServer runs an admin server over a fake backend reporting
// testStatus, and returns the server, the backend and the -admin flag.
func startServer(t *testing.T) (*admin.Server, *admintest.Backend, string) {
	t.Helper()
	b := admintest.NewBackend(testStatus)
	srv, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler)}, b)
	return srv, b, addr
}

// seqctl runs run with args and returns the exit status and output.
func seqctl(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestStatusTable(t *testing.T) {
	_, _, addr := startServer(t)
	code, out, errs := seqctl("-admin", addr, "-timeout", "30s", "status")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, re := range []string{
		"version +v0.1.0-test\n",
		"mode +spec-s0\n",
		"epoch +3\n",
		"persisted_mark +1500000\n",
		"headroom +500000 values\n",
		"sessions +0\n",
		"WORKER +CORE +BATCHES",
		"\n0 +2 +10 +40 +4.00 +0 +0 +1\n",
		"\n1 +- +1 +2 +2.00 ",
		"icrc_errors +0\nrx_packets +7\n",
	} {
		if !matches(re, out) {
			t.Errorf("status output lacks /%s/", re)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func TestStatusJSON(t *testing.T) {
	_, b, addr := startServer(t)
	ctx := t.Context()
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{{Address: make([]byte, 20), Qpn: 5}}, Window: 4}
	if _, err := adminpb.NewAdminClient(cc).Connect(ctx, req); err != nil {
		t.Fatal(err)
	}

	code, out, errs := seqctl("-admin", addr, "-timeout", "30s", "status", "-json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got adminpb.StatusResponse
	if err := protojson.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not a StatusResponse: %v\n%s", err, out)
	}
	want := proto.Clone(testStatus).(*adminpb.StatusResponse)
	want.Sessions = uint64(b.Sessions())
	want.Role = adminclient.RoleSingle // the admin server fills it for backends outside an HA group
	want.UptimeMs = got.GetUptimeMs()  // the admin server's, since it started
	if !proto.Equal(&got, want) {
		t.Fatalf("status -json = %v, want %v", &got, want)
	}
	// protojson varies its whitespace on purpose, so match loosely.
	if !matches(`"specMisses":\s*"0"`, out) {
		t.Errorf("zero fields are not emitted:\n%s", out)
	}
}

func TestHealth(t *testing.T) {
	srv, _, addr := startServer(t)
	code, out, errs := seqctl("-admin", addr, "-timeout", "30s", "health")
	if code != exitOK || out != "SERVING\n" {
		t.Fatalf("health = %d %q %q, want 0 SERVING", code, out, errs)
	}
	code, _, errs = seqctl("-admin", addr, "-timeout", "30s", "health", "-service", adminclient.ServiceName)
	if code != exitOK {
		t.Fatalf("health -service = %d %q", code, errs)
	}
	srv.SetServing(false)
	code, out, errs = seqctl("-admin", addr, "-timeout", "30s", "health")
	if code != exitFail || out != "" || !strings.Contains(errs, "NOT_SERVING") {
		t.Fatalf("health while not serving = %d %q %q, want 1 and NOT_SERVING", code, out, errs)
	}
	code, _, errs = seqctl("-admin", addr, "-timeout", "30s", "health", "-service", "no.such.Service")
	if code != exitFail || !strings.Contains(errs, "NotFound: unknown service") {
		t.Fatalf("health of unknown service = %d %q", code, errs)
	}
}

func TestServerDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	for _, cmd := range []string{"health", "status"} {
		code, _, errs := seqctl("-admin", addr, "-timeout", "30s", cmd)
		if code != exitFail || !strings.Contains(errs, "unavailable") {
			t.Errorf("%s with no server = %d %q, want 1 and unavailable", cmd, code, errs)
		}
	}
}

func TestBackendError(t *testing.T) {
	_, b, addr := startServer(t)
	b.Fail(fmt.Errorf("%w: recovering", admin.ErrUnavailable))
	code, _, errs := seqctl("-admin", addr, "-timeout", "30s", "status")
	// The kind is said once, and the way out follows.
	if code != exitFail || !strings.Contains(errs, "seqctl status: Unavailable: recovering (is seqd running at -admin") ||
		strings.Count(strings.ToLower(errs), "unavailable") != 1 {
		t.Fatalf("status = %d %q", code, errs)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		in   string // expected in stdout+stderr
	}{
		{nil, exitUsage, "commands:"},
		{[]string{"help"}, exitOK, "status"},
		{[]string{"-h"}, exitOK, "-admin"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"-nosuchflag", "status"}, exitUsage, "nosuchflag"},
		{[]string{"-timeout", "0s", "status"}, exitUsage, "-timeout"},
		{[]string{"status", "-nosuchflag"}, exitUsage, "usage: seqctl [flags] status [-o text|json]"},
		{[]string{"status", "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"health", "-h"}, exitUsage, "-service"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := seqctl(tc.args...)
			if code != tc.code || !strings.Contains(out+errs, tc.in) {
				t.Fatalf("exit %d, output %q %q; want %d and %q", code, out, errs, tc.code, tc.in)
			}
		})
	}
}

// matches reports whether the regular expression re matches s.
func matches(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
