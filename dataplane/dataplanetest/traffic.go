package dataplanetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/modes/adminmode"
	"github.com/seqd/seqd/verbs"
)

// callTimeout bounds one call of the suite's clients: a mode that does
// not answer fails the part after it.
const callTimeout = 10 * time.Second

// serveAdmin serves in over the admin protocol, as package modes does,
// and returns the address clients dial.
func (h *Harness) serveAdmin(t testing.TB, in *instance) string {
	t.Helper()
	b := &adminmode.Backend{Mode: in.Mode, Name: h.Name, Metrics: h.facts().Metrics, Format: in.cfg.Format,
		Epoch: in.cfg.Epoch, Device: in.cfg.Device, Oracle: in.oracle}
	_, addr := admintest.Start(t, admin.Config{Logger: quiet}, b)
	return addr
}

// dial connects a client to the admin server at adminAddr with a soft
// device at dev (provider options opts); closed when the test ends.
func dial(t testing.TB, adminAddr, dev, opts string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c, err := client.Dial(ctx, adminAddr, client.WithDevice("soft", dev, opts), client.WithQPs(2), client.WithWindow(8),
		client.WithTimeout(callTimeout), client.WithName("conformance"))
	if err != nil {
		t.Fatalf("client.Dial(%s, device %s %s) = %v", adminAddr, dev, opts, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// calls makes n calls on c (and, for a mode that serves ranges, n
// ranges of 3), each of whose values must be above floor and above
// every value before; it returns the largest.
func (h *Harness) calls(t testing.TB, c *client.Client, n int, floor uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*callTimeout)
	defer cancel()
	last := floor
	for i := range n {
		v, err := c.GetTimestamp(ctx)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if uint64(v) <= last {
			t.Fatalf("call %d returned %d, not above %d (the floor or the call before)", i, v, last)
		}
		last = uint64(v)
		if !h.facts().Ranges {
			continue
		}
		r, err := c.GetRange(ctx, 3)
		if err != nil {
			t.Fatalf("range %d: %v", i, err)
		}
		if uint64(r.First) <= last || r.Count != 3 {
			t.Fatalf("range %d: %+v, want 3 values above %d", i, r, last)
		}
		last = uint64(r.Last())
	}
	return last
}

// testServe: a client admitted through the admin protocol gets its
// calls answered, each value above the one before.
func testServe(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	c := dial(t, h.serveAdmin(t, in), "127.0.0.1:0", "")
	h.calls(t, c, 200, 0)
}

// testSourcePorts: a NIC sends every packet from a random UDP source
// port (per address handle or connection), so a mode must serve a peer
// whose packets do not come from the port it registered, and its
// answers must reach a client when the server is the NIC-like side.
// Both directions run on the soft provider's NIC-like wire mode
// (nicwire=on: the device listens on 4791 of its own loopback address
// and sends through a raw socket; it needs CAP_NET_RAW, and the part is
// skipped without it). The multi-host test of the same
// (e2e/multihost TestNICWirePeerBothWays) runs the binaries between
// network namespaces.
func testSourcePorts(t testing.TB, h *Harness) {
	if os.Geteuid() != 0 {
		t.Skip("dataplanetest: the NIC-like wire mode (nicwire=on) needs CAP_NET_RAW; not root")
	}
	for _, tc := range []struct {
		name       string
		srvNICLike bool
	}{
		{"client NIC-like", false},
		{"server NIC-like", true},
	} {
		var in *instance
		cli, cliOpts := "127.0.0.1:0", ""
		if tc.srvNICLike {
			in = h.start(t, openAt4791(t, "nicwire=on"), nil)
		} else {
			in = h.start(t, nil, nil)
			cli, cliOpts = randomAt4791(), "nicwire=on"
		}
		c := dial(t, h.serveAdmin(t, in), cli, cliOpts)
		h.calls(t, c, 50, 0)
		t.Logf("%s: 50 calls served", tc.name)
	}
}

// randomAt4791 is port 4791 of a random loopback address.
func randomAt4791() string {
	return fmt.Sprintf("127.%d.%d.%d:4791", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))
}

// openAt4791 opens a soft device (options opts) on port 4791 of a
// random loopback address, the way a NIC listens.
func openAt4791(t testing.TB, opts string) verbs.Device {
	t.Helper()
	o, err := verbs.ParseOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for range 8 {
		d, err := verbs.Open("soft", randomAt4791(), o)
		if err == nil {
			t.Cleanup(func() { d.Close() })
			return d
		}
		last = err
	}
	t.Fatalf("dataplanetest: no soft device (%s) on port 4791 of a loopback address: %v", opts, last)
	return nil
}

// testSwitch: a mode switch out of the mode and back in, as package
// modes makes it: the running start is stopped (its high taken) and
// closed, the oracle floored above the high, and the mode started again
// on the same device under a new epoch. The new start serves a new
// client values above every value of the old one, and a ref of the old
// start names no session of the new one, even when the IDs coincide.
func testSwitch(t testing.TB, h *Harness) {
	dev := open(t, "127.0.0.1:0", "")
	o := &Oracle{}
	old := h.start(t, dev, o)
	oldRef := ref(old.admit(t, h.admission(1, 1), handshake.SessionRef{}))
	c := dial(t, h.serveAdmin(t, old), "127.0.0.1:0", "")
	last := h.calls(t, c, 50, 0)
	high, err := old.Stop()
	if err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err := old.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	o.Floor(max(high, o.Current()))

	in := h.start(t, dev, o)
	if in.cfg.Epoch == old.cfg.Epoch {
		t.Fatal("the suite started the mode twice under one epoch")
	}
	g := in.admit(t, h.admission(1, 1), handshake.SessionRef{}) // the same QPs as the old start's session
	err = in.Release(context.Background(), oldRef)
	wantKind(t, "Release of the old start's session in the new start", err, dataplane.ErrUnknownSession)
	in.wantSessions(t, 1, "after releasing the old start's session")
	if err := in.Release(context.Background(), ref(g)); err != nil {
		t.Fatalf("Release = %v", err)
	}
	c2 := dial(t, h.serveAdmin(t, in), "127.0.0.1:0", "")
	h.calls(t, c2, 50, last)
}
