//go:build linux

package soft

import (
	"errors"
	"strings"
	"testing"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/soft/internal/xsk"
)

// TestXDPNotLinked: a binary that does not import verbs/soft/xdp (the
// client, so as not to carry an eBPF loader) refuses xdp= with an error
// that names the package, never a silent fallback to the UDP socket.
func TestXDPNotLinked(t *testing.T) {
	saved := xsk.AttachPorts
	xsk.AttachPorts = nil
	defer func() { xsk.AttachPorts = saved }()
	d, err := Open("127.0.0.1:0", verbs.Options{"xdp": "lo"})
	if err == nil {
		d.Close()
		t.Fatal("xdp=lo opened without AF_XDP support linked")
	}
	if !errors.Is(err, verbs.ErrInvalidArgument) || !strings.Contains(err.Error(), "github.com/seqd/seqd/verbs/soft/xdp") {
		t.Fatalf("xdp=lo without verbs/soft/xdp: %v; want an invalid-argument error naming the package", err)
	}
}
