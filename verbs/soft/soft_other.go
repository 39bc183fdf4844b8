//go:build !linux

package soft

import (
	"fmt"
	"runtime"

	"github.com/seqd/seqd/verbs"
)

// The userspace provider needs Linux's batch socket calls (recvmmsg,
// sendmmsg, UDP GSO and GRO). Elsewhere it registers under its name and
// fails at Open, so that programs linking it still build.

func init() { verbs.Register("soft", Open) }

// Open fails: the soft provider runs on Linux only.
func Open(device string, opts verbs.Options) (verbs.Device, error) {
	return nil, fmt.Errorf("%w: the soft provider runs on Linux only (it needs recvmmsg, sendmmsg and UDP GSO/GRO), not on %s/%s; choose another provider with client.WithDevice",
		verbs.ErrNotSupported, runtime.GOOS, runtime.GOARCH)
}
