package multihost

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
)

// TestXDPServer runs seqd with the userspace provider receiving through
// AF_XDP (-provider-opts xdp=eth0: an XDP program on the host's veth
// steers RoCEv2 to an AF_XDP socket, the provider parses the frames and
// checks the ICRC over the real IPv4 header) and loadgen's clients on
// another host, every mode, every answer verified (-verify). seqd's
// metrics must show that requests came through the AF_XDP ring.
func TestXDPServer(t *testing.T) {
	rig := netnstest.New(t)
	srv, cli := rig.AddHost("xdp"), rig.AddHost("cli")
	admin := srv.HostPort(7070)
	metrics := srv.HostPort(9090)
	args := append([]string{"-admin", admin, "-device", srv.HostPort(4791), "-metrics", metrics,
		"-data", t.TempDir(), "-admin-insecure-no-auth", "-provider-opts", "xdp=eth0"}, newDeployment(t)...)
	p := start(t, srv, bin(t, "seqd"), args...)
	defer p.kill()
	waitFor(t, 20*time.Second, "seqd on "+srv.Name, func() bool {
		_, _, code := run(t, 5*time.Second, cli, bin(t, "seqctl"), "-admin", admin, "-insecure", "-timeout", "1s", "health")
		return code == 0
	})
	js := filepath.Join(t.TempDir(), "lg.json")
	out, errOut, code := run(t, 3*time.Minute, cli, bin(t, "loadgen"), "-json-file", js, "-quiet", "-verify",
		"-admin", admin, "-insecure", "-modes", strings.Join(nicModes, ","), "-clients", "2",
		"-duration", "1s", "-warmup", "200ms", "-echo", "-1s")
	if code != 0 {
		t.Fatalf("loadgen: exit %d\n%s\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var r lgReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("loadgen -json-file: %v", err)
	}
	if r.Violations != 0 || len(r.Results) != len(nicModes) {
		t.Fatalf("loadgen: %+v\n%s", r, out)
	}
	for i, res := range r.Results {
		if res.Mode != nicModes[i] || res.ThroughputOps <= 0 {
			t.Errorf("loadgen result %d: %+v, want %s with answers", i, res, nicModes[i])
		}
		t.Logf("RIG xdp: %s %.0f ops/s p99 %.0fus, verified", res.Mode, res.ThroughputOps, res.P99us)
	}
	m, _, code := run(t, 10*time.Second, cli, "curl", "-s", "http://"+metrics+"/metrics")
	if code != 0 {
		t.Fatalf("curl metrics: exit %d", code)
	}
	frames := ""
	for _, l := range strings.Split(m, "\n") {
		if strings.Contains(l, "xdp_rx_frames") && !strings.HasPrefix(l, "#") {
			frames = l
		}
	}
	t.Logf("seqd metrics: %s", frames)
	f := strings.Fields(frames)
	if len(f) < 2 || f[len(f)-1] == "0" {
		t.Fatalf("no AF_XDP frames in seqd's metrics: %q", frames)
	}
}
