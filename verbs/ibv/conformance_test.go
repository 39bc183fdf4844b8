//go:build ibverbs && cgo

package ibv

import (
	"testing"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// TestConformance runs the shared verbs suite with both ends on the same
// NIC: the device is opened twice, and the two contexts talk through it.
// Without a device it skips, saying why.
func TestConformance(t *testing.T) {
	openDevice(t).Close()
	verbstest.Run(t, func(t *testing.T) (a, b verbs.Device) {
		return openDevice(t), openDevice(t)
	})
}
