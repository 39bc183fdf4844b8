package multihost

import (
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/modes"
)

// nicModes are the modes the NIC-like interop test runs, each verified:
// every mode seqd registers, so a mode added later is covered too.
var nicModes = modes.All

// TestNICWirePeerBothWays runs seqd's server and client against the
// userspace provider's NIC-like wire mode (nicwire=on: it listens on 4791
// only, sends from a random UDP source port per address handle in the
// RoCE range, stamps real non-zero IPv4 IDs and computes its ICRCs over
// them, through a raw socket), in both directions: seqd on the NIC-like
// host with loadgen's clients on a plain host, then seqd on a plain host
// at 4791 with loadgen's clients NIC-like. Every answer of every mode is
// verified by loadgen (-verify).
func TestNICWirePeerBothWays(t *testing.T) {
	rig := netnstest.New(t)
	nic, plain := rig.AddHost("nic"), rig.AddHost("plain")
	for _, tc := range []struct {
		name           string
		srv, cli       *netnstest.Host
		srvOpts, cliLG []string
	}{
		{"seqd NIC-like, clients plain", nic, plain, []string{"-provider-opts", "nicwire=on"}, nil},
		{"seqd plain, clients NIC-like", plain, nic, nil,
			[]string{"-device", nic.HostPort(4791), "-provider-opts", "nicwire=on"}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			admin := tc.srv.HostPort(7070)
			args := append([]string{"-admin", admin, "-device", tc.srv.HostPort(4791), "-metrics", "off",
				"-data", t.TempDir(), "-admin-insecure-no-auth"}, newDeployment(t)...)
			p := start(t, tc.srv, bin(t, "seqd"), append(args, tc.srvOpts...)...)
			defer p.kill()
			waitFor(t, 20*time.Second, "seqd on "+tc.srv.Name, func() bool {
				_, _, code := run(t, 5*time.Second, tc.cli, bin(t, "seqctl"), "-admin", admin, "-insecure", "-timeout", "1s", "health")
				return code == 0
			})
			r, err := loadgenJSON(bin(t, "loadgen"), tc.cli, append([]string{"-admin", admin, "-insecure",
				"-modes", strings.Join(nicModes, ","), "-clients", "1", "-duration", "1s", "-warmup", "200ms",
				"-echo", "-1s"}, tc.cliLG...)...)
			if err != nil {
				t.Fatalf("loadgen on %s: %v", tc.cli.Name, err)
			}
			if len(r.Results) != len(nicModes) {
				t.Fatalf("loadgen: %+v", r)
			}
			for i, res := range r.Results {
				if res.Mode != nicModes[i] || res.ThroughputOps <= 0 {
					t.Errorf("loadgen result %d: %+v, want %s with answers", i, res, nicModes[i])
				}
				t.Logf("RIG nicwire %s: %s %.0f ops/s p99 %.0fus, verified", tc.name, res.Mode, res.ThroughputOps, res.P99us)
			}
		})
	}
}
