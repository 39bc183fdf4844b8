package verbstest

import (
	"fmt"
	"testing"

	"github.com/seqd/seqd/verbs"
)

// Opener opens two devices that can reach each other. Run calls it once
// per subtest and closes both devices when the subtest ends (after
// everything made from them), so an Opener need not close them itself.
// It fails or skips t when the devices cannot be opened.
type Opener func(t *testing.T) (a, b verbs.Device)

// test is one subtest: fn gets two fresh devices.
type test struct {
	name string
	fn   func(t *testing.T, a, b verbs.Device)
}

// Run runs the whole conformance suite against the provider behind open.
func Run(t *testing.T, open Opener) {
	var all []test
	all = append(all, deviceTests()...)
	all = append(all, udTests()...)
	all = append(all, ucTests()...)
	all = append(all, rcTests()...)
	all = append(all, atomicPolicyTests()...)
	all = append(all, qpTests()...)
	all = append(all, cqTests()...)
	all = append(all, badInputTests()...)
	runTests(t, open, all)
}

// RunRC runs only the RC subtests: the reliable transport must pass them
// unchanged when the provider loses, duplicates or reorders packets, so a
// provider with fault injection runs them again with it on.
func RunRC(t *testing.T, open Opener) {
	runTests(t, open, rcTests())
}

func runTests(t *testing.T, open Opener, tests []test) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, open)
			tc.fn(t, a, b)
		})
	}
}

func openPair(t *testing.T, open Opener) (a, b verbs.Device) {
	t.Helper()
	a, b = open(t)
	if a == nil || b == nil {
		t.Fatalf("verbstest: Opener returned a nil device (a=%v, b=%v)", a, b)
	}
	// Registered first, so they close last.
	CloseLater(t, "device "+a.Name(), a)
	CloseLater(t, "device "+b.Name(), b)
	return a, b
}

func deviceTests() []test {
	return []test{{"Device/Attr", testDeviceAttr}}
}

func testDeviceAttr(t *testing.T, a, b verbs.Device) {
	for _, d := range []verbs.Device{a, b} {
		at := d.Attr()
		if d.Name() == "" {
			t.Errorf("device has an empty name")
		}
		if at.MaxQP <= 0 || at.MaxQPWR <= 0 || at.MaxSGE <= 0 || at.MaxCQE <= 0 || at.MaxMRSize == 0 {
			t.Errorf("%s: limits must be positive: %+v", d.Name(), at)
		}
		if at.ActiveMTU.Bytes() == 0 {
			t.Errorf("%s: ActiveMTU %d is not a valid MTU", d.Name(), at.ActiveMTU)
		}
		if at.MaxRdAtomic <= 0 {
			t.Errorf("%s: MaxRdAtomic %d, want > 0", d.Name(), at.MaxRdAtomic)
		}
	}
}

// checkBytes reports the first difference between got and want.
func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: byte %d is %#02x, want %#02x (%s)", what, i, got[i], want[i], around(got, want, i))
			return
		}
	}
}

// checkUntouched reports a byte of b that is not v.
func checkUntouched(t *testing.T, what string, b []byte, v byte) {
	t.Helper()
	for i, x := range b {
		if x != v {
			t.Errorf("%s: byte %d was overwritten with %#02x", what, i, x)
			return
		}
	}
}

func around(got, want []byte, i int) string {
	lo, hi := max(0, i-4), min(len(got), i+8)
	return fmt.Sprintf("got[%d:%d]=% x want % x", lo, hi, got[lo:hi], want[lo:hi])
}
