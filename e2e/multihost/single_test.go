package multihost

import (
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
)

// One seqd on one host (admin TLS); the client library, seqctl and
// loadgen each on a host of their own, configured by the server's address
// alone (their devices chosen by route). Every call is verified.
func TestSingleSeqdRemoteClients(t *testing.T) {
	rig := netnstest.New(t)
	srv, lib, ctl, lg := rig.AddHost("srv"), rig.AddHost("lib"), rig.AddHost("ctl"), rig.AddHost("lg")
	tf := makeTLS(t)
	admin := srv.HostPort(7070)
	start(t, srv, bin(t, "seqd"), seqdArgs(t, srv, tf, "-data", t.TempDir())...)
	waitFor(t, 20*time.Second, "seqd serving", func() bool {
		_, _, code := run(t, 5*time.Second, ctl, bin(t, "seqctl"), "-admin", admin, "-tls-ca", tf.CA, "-timeout", "1s", "health")
		return code == 0
	})

	// seqctl on its own host.
	st, err := status(t, ctl, tf, admin)
	if err != nil {
		t.Fatal(err)
	}
	if st["role"] != "single" {
		t.Errorf("seqctl status: role %v, want single: %v", st["role"], st)
	}

	// The library on another host, under load.
	rc := startClients(t, lib, 8, admin, "-tls-ca", tf.CA, "-period", "2ms")
	var during map[string]any
	waitFor(t, 20*time.Second, "8 sessions seen by seqctl", func() bool {
		during, err = status(t, ctl, tf, admin)
		return err == nil && during["sessions"] == "8"
	})
	// loadgen on a third host, verified, while the library's load runs.
	ops, _ := loadgenRun(t, lg, "-admin", admin, "-tls-ca", tf.CA, "-duration", "1s", "-warmup", "200ms", "-echo", "-1s")

	var h history
	h.add(rc.stop())
	n := h.check(t)
	if n.calls < 8 {
		t.Errorf("only %d calls", n.calls)
	}
	if during["current"] == st["current"] {
		t.Errorf("seqctl status: current value did not move under load: %v", during["current"])
	}
	t.Logf("RIG single: %v from %d sessions on %s; loadgen on %s: %.3f Mops/s, verified", n, len(h.sessions), lib.Addr, lg.Addr, ops/1e6)
}
