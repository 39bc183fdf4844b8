package soft_test

import (
	"testing"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

// opener opens two soft devices on ephemeral loopback ports, a with
// options optsA and b with optsB.
func opener(optsA, optsB string) verbstest.Opener {
	return func(t *testing.T) (a, b verbs.Device) {
		return openSoft(t, "127.0.0.1:0", optsA), openSoft(t, "127.0.0.1:0", optsB)
	}
}

// openSoft opens a soft device; the caller (or verbstest) closes it.
func openSoft(t *testing.T, device, opts string) verbs.Device {
	t.Helper()
	o, err := verbs.ParseOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := soft.Open(device, o)
	if err != nil {
		t.Fatalf("soft.Open(%q, %q): %v", device, opts, err)
	}
	return d
}

func TestConformance(t *testing.T) {
	verbstest.Run(t, opener("", ""))
}

// Several queues per device: QPs of one test land on different sockets.
func TestConformanceQueues3(t *testing.T) {
	verbstest.Run(t, opener("queues=3", "queues=3"))
}

// Without UDP GSO and GRO: one datagram per packet each way.
func TestConformanceNoGSO(t *testing.T) {
	verbstest.Run(t, opener("gso=off,gro=off", "gso=off,gro=off"))
}

// RC must hide loss: retransmission, duplicate detection, replayed
// atomics. The two devices lose different packets.
func TestConformanceRCLoss(t *testing.T) {
	verbstest.RunRC(t, opener("loss=0.05,seed=1", "loss=0.05,seed=2"))
}

// RC must hide duplicated and reordered packets too.
func TestConformanceRCDupReorder(t *testing.T) {
	verbstest.RunRC(t, opener("dup=0.05,reorder=0.05,seed=3", "dup=0.05,reorder=0.05,seed=4"))
}

// A device listening on every address (as in a container), advertising
// its loopback address: the ICRC uses each datagram's destination from
// IP_PKTINFO.
func TestConformanceWildcard(t *testing.T) {
	verbstest.Run(t, func(t *testing.T) (a, b verbs.Device) {
		return openSoft(t, "0.0.0.0:0", "advertise=127.0.0.1"), openSoft(t, "127.0.0.1:0", "")
	})
}

func TestWildcardNeedsAdvertise(t *testing.T) {
	for _, tc := range []struct{ device, opts string }{
		{"0.0.0.0:0", ""},
		{"0.0.0.0:0", "advertise=0.0.0.0"},
		{"127.0.0.1:0", "advertise=127.0.0.2"},
		{"[::1]:0", ""},
	} {
		o, _ := verbs.ParseOptions(tc.opts)
		if d, err := soft.Open(tc.device, o); err == nil {
			d.Close()
			t.Errorf("Open(%q, %q) succeeded", tc.device, tc.opts)
		}
	}
}
