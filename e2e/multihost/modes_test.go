package multihost

import (
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/spec"
)

// Every mode served to clients on other hosts: one seqd, four library
// clients on one host calling throughout, while seqctl on a third host
// switches the mode through spec.Modes and loadgen on a fourth drives and
// verifies each mode. The library clients' whole history, across every
// switch, is checked too.
func TestEveryModeRemoteClients(t *testing.T) {
	rig := netnstest.New(t)
	srv, lib, ctl, lg := rig.AddHost("srv"), rig.AddHost("lib"), rig.AddHost("ctl"), rig.AddHost("lg")
	tf := makeTLS(t)
	admin := srv.HostPort(7070)
	start(t, srv, bin(t, "seqd"), seqdArgs(t, srv, tf, "-data", t.TempDir())...)
	waitFor(t, 20*time.Second, "seqd serving", func() bool {
		_, _, code := run(t, 5*time.Second, ctl, bin(t, "seqctl"), "-admin", admin, "-tls-ca", tf.CA, "-timeout", "1s", "health")
		return code == 0
	})
	rc := startClients(t, lib, 4, admin, "-tls-ca", tf.CA, "-period", "2ms")
	for _, mode := range spec.Modes {
		out, errOut, code := run(t, 30*time.Second, ctl, bin(t, "seqctl"), "-admin", admin, "-tls-ca", tf.CA, "set-mode", mode)
		if code != 0 {
			t.Fatalf("seqctl set-mode %s: exit %d\n%s\n%s", mode, code, out, errOut)
		}
		ops, _ := loadgenRun(t, lg, "-admin", admin, "-tls-ca", tf.CA, "-modes", mode, "-duration", "1s", "-warmup", "200ms", "-echo", "-1s")
		if ops <= 0 {
			t.Errorf("%s: loadgen on %s measured %v ops/s", mode, lg.Addr, ops)
		}
		t.Logf("RIG mode=%s loadgen_on=%s ops=%.0f verified", mode, lg.Addr, ops)
	}
	var h history
	h.add(rc.stop())
	n := h.check(t)
	if n.calls < 4*len(spec.Modes) {
		t.Errorf("only %d library calls across %d modes", n.calls, len(spec.Modes))
	}
	t.Logf("RIG every mode: %v from %d sessions on %s across %v", n, len(h.sessions), lib.Addr, spec.Modes)
}
