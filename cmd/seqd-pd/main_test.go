package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	pd "github.com/tikv/pd/client"

	seqdrun "github.com/seqd/seqd/server"
	_ "github.com/seqd/seqd/verbs/soft"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestServe runs seqd-pd's main against seqd (in-process), configured
// partly through SEQD_PD_* variables, has PD's client get timestamps
// through it, and reads both metric families off -metrics.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan seqdrun.Addrs, 1)
	seqdDone := make(chan error, 1)
	go func() {
		seqdDone <- seqdrun.Run(ctx, seqdrun.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: t.TempDir(), Init: true, Mode: "fasst"},
			slog.New(slog.DiscardHandler), func(a seqdrun.Addrs) { ready <- a })
	}()
	var seqd seqdrun.Addrs
	select {
	case seqd = <-ready:
	case err := <-seqdDone:
		t.Fatal(err)
	}
	metrics := freeAddr(t)
	t.Setenv("SEQD_PD_CLUSTER_ID", "9")
	t.Setenv("SEQD_PD_METRICS", "127.0.0.1:1") // the command line wins
	t.Setenv("SEQD_PD_LOG_FORMAT", "json")
	var logs syncBuf
	listening := make(chan string, 1)
	pdDone := make(chan int, 1)
	pctx, pcancel := context.WithCancel(ctx)
	// -admin is the address list seqctl and loadgen take: a member that
	// is down is skipped.
	list := freeAddr(t) + ", " + seqd.Admin
	go func() {
		pdDone <- run(pctx, []string{"-listen", "127.0.0.1:0", "-admin", list, "-metrics", metrics}, &logs, nil, func(a string) { listening <- a })
	}()
	c := pdClient(ctx, t, listening, pdDone, &logs)
	defer c.Close()
	if id := c.GetClusterID(ctx); id != 9 {
		t.Fatalf("cluster ID %d, want 9 (SEQD_PD_CLUSTER_ID)", id)
	}
	var last uint64
	for range 100 {
		p, l, err := c.GetTS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v := uint64(p)<<18 + uint64(l)
		if v <= last {
			t.Fatalf("%d after %d", v, last)
		}
		last = v
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"seqd_pd_tso_timestamps_total 100", "seqd_client_calls_total 100", "seqd_pd_tso_handle_duration_seconds_bucket"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if pt, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(pt, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
	pcancel()
	if code := <-pdDone; code != 0 {
		t.Fatalf("seqd-pd exited %d", code)
	}
	if !strings.Contains(logs.String(), `"msg":"seqd-pd stopped"`) {
		t.Errorf("not JSON logs (SEQD_PD_LOG_FORMAT):\n%s", logs.String())
	}
}

// A malformed -admin list is a usage error (exit 2) that names the bad
// entry, before anything is dialled.
func TestSeqdListFlag(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"127.0.0.1:7070,,127.0.0.1:7071", "empty address"},
		{"::1:7070", "IPv6 host goes in brackets"},
		{"127.0.0.1:7070,nohostport", `"nohostport": want host:port`},
		{"", "empty address list"},
	} {
		var logs syncBuf
		if code := run(t.Context(), []string{"-admin", tc.list, "-metrics", "off"}, &logs, nil, nil); code != 2 || !strings.Contains(logs.String(), tc.want) {
			t.Errorf("-admin %q: exit %d %q, want 2 and %q", tc.list, code, logs.String(), tc.want)
		}
	}
}

// TestFlagVocabulary is issue 29 item 1: seqd-pd called seqd's admin
// addresses -seqd (loadgen's -seqd was a binary's path), had no -version,
// and ignored a mistyped SEQD_PD_ variable. -admin it is now; -seqd still
// works for a release, with a warning.
func TestFlagVocabulary(t *testing.T) {
	defer func(e func() []string, w io.Writer) { environ, stdout = e, w }(environ, stdout)
	environ = func() []string { return nil }
	var logs syncBuf
	if code := run(t.Context(), []string{"-seqd", "::1:7070"}, &logs, nil, nil); code != 2 ||
		!strings.Contains(logs.String(), "-seqd is deprecated") || !strings.Contains(logs.String(), "-admin: ") {
		t.Fatalf("-seqd: exit %d %q", code, logs.String())
	}
	environ = func() []string { return []string{"SEQD_PD_SEQD_ADDR=127.0.0.1:7070", "SEQD_ADMIN=x"} }
	logs = syncBuf{}
	if code := run(t.Context(), nil, &logs, nil, nil); code != 2 || !strings.Contains(logs.String(), "unknown variable SEQD_PD_SEQD_ADDR") {
		t.Fatalf("SEQD_PD_SEQD_ADDR: exit %d %q", code, logs.String())
	}
	var out strings.Builder
	stdout = &out
	logs = syncBuf{}
	if code := run(t.Context(), []string{"-version"}, &logs, nil, nil); code != 0 || !strings.HasPrefix(out.String(), "seqd-pd ") {
		t.Fatalf("-version: exit %d %q %q", code, out.String(), logs.String())
	}
	logs = syncBuf{}
	if code := run(t.Context(), []string{"-h"}, &logs, nil, nil); code != 0 || !strings.Contains(logs.String(), "env SEQD_PD_ADMIN\n") {
		t.Fatalf("-h: exit %d %q", code, logs.String())
	}
}

// TestWaitsForSeqd: seqd-pd started before seqd (a script that starts
// both, units started together) waits for it, and serves once it
// answers. Before, it exited at once ("no seqd answers", the README's
// seqd-pd recipe failed in CI when seqd-pd won the race).
func TestWaitsForSeqd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := freeAddr(t)
	var logs syncBuf
	listening := make(chan string, 1)
	pdDone := make(chan int, 1)
	go func() {
		pdDone <- run(ctx, []string{"-listen", "127.0.0.1:0", "-admin", admin, "-metrics", "off"}, &logs, nil, func(a string) { listening <- a })
	}()
	// seqd starts once seqd-pd has found it missing.
	for !strings.Contains(logs.String(), "waiting for seqd") {
		select {
		case code := <-pdDone:
			t.Fatalf("seqd-pd exited %d before seqd started:\n%s", code, logs.String())
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready := make(chan seqdrun.Addrs, 1)
	go seqdrun.Run(ctx, seqdrun.Config{Device: "127.0.0.1:0", Admin: admin, Metrics: "off", Data: t.TempDir(), Init: true, Mode: "fasst"},
		slog.New(slog.DiscardHandler), func(a seqdrun.Addrs) { ready <- a })
	c := pdClient(ctx, t, listening, pdDone, &logs)
	defer c.Close()
	if _, _, err := c.GetTS(ctx); err != nil {
		t.Fatal(err)
	}
}

// pdClient waits until seqd-pd (its run sends its address on listening,
// its exit code on done) listens, and returns PD's client to it.
func pdClient(ctx context.Context, t *testing.T, listening <-chan string, done <-chan int, logs *syncBuf) pd.Client {
	t.Helper()
	var addr string
	select {
	case addr = <-listening:
	case code := <-done:
		t.Fatalf("seqd-pd exited %d:\n%s", code, logs.String())
	}
	c, err := pd.NewClientWithContext(ctx, []string{addr}, pd.SecurityOption{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
