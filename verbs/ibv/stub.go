//go:build !ibverbs || !cgo

package ibv

import (
	"fmt"

	"github.com/seqd/seqd/verbs"
)

func init() { verbs.Register("ibv", open) }

// open is the provider entry point of a build without libibverbs: it
// always fails, saying how to get the real provider.
func open(device string, opts verbs.Options) (verbs.Device, error) {
	return nil, fmt.Errorf("ibv: %w: built without libibverbs: rebuild with -tags ibverbs (CGO_ENABLED=1, libibverbs-dev)", verbs.ErrNotSupported)
}
