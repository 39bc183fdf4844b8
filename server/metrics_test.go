package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/seqd/seqd/client"
)

// serve runs seqd with c on free loopback ports until the test ends.
func serve(t *testing.T, c Config) Addrs {
	t.Helper()
	c.Device, c.Admin, c.Metrics, c.Data, c.Init = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), true
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, quiet, func(a Addrs) { ready <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("seqd not ready in 30s")
	}
	return Addrs{}
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestMetricsTellTheStory: after traffic, /metrics has seqd_build_info,
// the admin plane's request counter and sessions gauge, the service-time
// histogram of the mode, and the verbs families; promtool finds nothing
// to complain about; pprof answers only with -pprof.
func TestMetricsTellTheStory(t *testing.T) {
	a := serve(t, Config{Pprof: true, Version: "v-test"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.Admin, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts := make([]client.Timestamp, 64)
	for range 100 {
		if err := c.GetTimestamps(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	code, body := get(t, "http://"+a.Metrics+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, re := range []string{
		`(?m)^seqd_build_info\{goversion="go[^"]+",revision="[^"]+",version="v-test"\} 1$`,
		`(?m)^seqd_admin_requests_total\{code="OK",method="Connect"\} [1-9]`,
		`(?m)^seqd_admin_sessions 1$`,
		`(?m)^seqd_service_time_seconds_bucket\{mode="spec-s0",le="\+Inf"\} `,
		`(?m)^seqd_verbs_packets_total\{direction="rx"\} [1-9]`,
		`(?m)^seqd_verbs_syscalls_total\{direction="tx"\} [1-9]`,
		`(?m)^seqd_verbs_drops_total\{reason="bad_qkey"\} `,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	// 6400 requests, at least one batch in 16 sampled.
	m := regexp.MustCompile(`(?m)^seqd_service_time_seconds_count\{mode="spec-s0"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatal("no seqd_service_time_seconds_count")
	}
	if n, _ := strconv.Atoi(string(m[1])); n == 0 {
		t.Errorf("no service time sampled in 100 chains of 64")
	}
	if bytes.Contains(body, []byte("seqd_verbs_events_total")) {
		t.Error("the mixed seqd_verbs_events_total family is still exported")
	}
	if pt, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(pt, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: check metrics skipped")
	}
	if code, body := get(t, "http://"+a.Metrics+"/debug/pprof/"); code != http.StatusOK || !bytes.Contains(body, []byte("goroutine")) {
		t.Errorf("-pprof: /debug/pprof/ = %d", code)
	}
	off := serve(t, Config{})
	if code, _ := get(t, "http://"+off.Metrics+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("without -pprof: /debug/pprof/ = %d, want 404", code)
	}
}
