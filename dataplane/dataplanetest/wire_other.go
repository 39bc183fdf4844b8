//go:build !linux

package dataplanetest

import "testing"

func testWire(t testing.TB, h *Harness) {
	t.Skip("dataplanetest: loadgen's wire generator runs on Linux only")
}
