package multihost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
)

// lgResult is the part of one loadgen -json-file result these tests read.
type lgResult struct {
	Mode          string  `json:"mode"`
	ThroughputOps float64 `json:"throughput_ops"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	Retransmits   uint64  `json:"retransmits"`
}

// lgReport is the part of loadgen -json-file these tests read.
type lgReport struct {
	Results    []lgResult `json:"results"`
	Violations int        `json:"violations"`
}

// loadgenJSON runs the loadgen binary on h with args, verified, bounded
// by 3 minutes, and returns its report; an exit other than 0 or a
// violation is an error. Safe from any goroutine.
func loadgenJSON(loadgen string, h *netnstest.Host, args ...string) (lgReport, error) {
	dir, err := os.MkdirTemp("", "seqd-lg-")
	if err != nil {
		return lgReport{}, err
	}
	defer os.RemoveAll(dir)
	js := filepath.Join(dir, "lg.json")
	cmd := h.Command(loadgen, append([]string{"-json-file", js, "-quiet", "-verify"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	timer := time.AfterFunc(3*time.Minute, func() { cmd.Process.Kill() })
	err = cmd.Run()
	timer.Stop()
	if err != nil {
		return lgReport{}, fmt.Errorf("loadgen %v: %v\n%s", args, err, out.String())
	}
	data, err := os.ReadFile(js)
	if err != nil {
		return lgReport{}, err
	}
	var r lgReport
	if err := json.Unmarshal(data, &r); err != nil {
		return lgReport{}, fmt.Errorf("loadgen -json-file: %w", err)
	}
	if r.Violations != 0 {
		return r, fmt.Errorf("loadgen %v: %d violations\n%s", args, r.Violations, out.String())
	}
	return r, nil
}

// loadgenOne is loadgenJSON of a run of one mode and point: its one
// result, which must have answers.
func loadgenOne(loadgen string, h *netnstest.Host, args ...string) (lgResult, error) {
	r, err := loadgenJSON(loadgen, h, args...)
	if err != nil {
		return lgResult{}, err
	}
	if len(r.Results) != 1 || r.Results[0].ThroughputOps <= 0 {
		return lgResult{}, fmt.Errorf("loadgen %v: %+v", args, r)
	}
	return r.Results[0], nil
}

// loadgenRun runs loadgen on h with args, requires a clean verified run
// (exit 0, no violations) and returns its one result's throughput and
// p99, which must be of the mode asked for.
func loadgenRun(t *testing.T, h *netnstest.Host, args ...string) (ops, p99 float64) {
	t.Helper()
	r, err := loadgenOne(bin(t, "loadgen"), h, args...)
	if err != nil {
		t.Fatalf("loadgen on %s: %v", h.Name, err)
	}
	want := "spec-s0" // loadgen's default mode
	for i, a := range args {
		if a == "-modes" && i+1 < len(args) {
			want = args[i+1]
		}
	}
	if r.Mode != want {
		t.Fatalf("loadgen %v on %s measured mode %q, want %q", args, h.Name, r.Mode, want)
	}
	return r.ThroughputOps, r.P99us
}

// loadgen measures a seqd on another host, over a plaintext admin plane
// chosen with -insecure and its clients' device chosen by route, and, in
// the same run, a seqd on its own host's loopback: both verified, both
// printed with their ratio (RIG loadgen ...). The two runs take turns, so
// they do not share the CPU.
func TestLoadgenRemoteVsLoopback(t *testing.T) {
	rig := netnstest.New(t)
	srv, lg, lo := rig.AddHost("srv"), rig.AddHost("lg"), rig.AddHost("lo")
	// The remote seqd: plaintext admin on its host's address.
	start(t, srv, bin(t, "seqd"), append([]string{"-admin", srv.HostPort(7070), "-device", srv.HostPort(4791),
		"-metrics", "off", "-data", t.TempDir(), "-admin-insecure-no-auth"}, newDeployment(t)...)...)
	// The loopback seqd: the defaults (127.0.0.1) on a host of its own.
	start(t, lo, bin(t, "seqd"), append([]string{"-metrics", "off", "-data", t.TempDir()}, newDeployment(t)...)...)
	for _, c := range []struct {
		h    *netnstest.Host
		args []string
	}{{lg, []string{"-admin", srv.HostPort(7070), "-insecure"}}, {lo, nil}} {
		waitFor(t, 20*time.Second, "seqd on "+c.h.Name, func() bool {
			_, _, code := run(t, 5*time.Second, c.h, bin(t, "seqctl"), append(c.args, "-timeout", "1s", "health")...)
			return code == 0
		})
	}
	common := []string{"-duration", "2s", "-warmup", "500ms", "-echo", "-1s", "-clients", "2", "-window", "64"}
	var rem, loop, remP99, loopP99 float64
	for range 2 { // alternate: remote, loopback, remote, loopback; keep the best of each
		o, p := loadgenRun(t, lg, append([]string{"-admin", srv.HostPort(7070), "-insecure"}, common...)...)
		if o > rem {
			rem, remP99 = o, p
		}
		o, p = loadgenRun(t, lo, common...)
		if o > loop {
			loop, loopP99 = o, p
		}
	}
	t.Logf("RIG loadgen %s remote=%.3f Mops/s (p99 %.0fus, seqd on %s, loadgen on %s) loopback=%.3f Mops/s (p99 %.0fus) remote/loopback=%.2f",
		strings.Join(common, " "), rem/1e6, remP99, srv.Addr, lg.Addr, loop/1e6, loopP99, rem/loop)
}
