//go:build !ibverbs || !cgo

package ibv

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seqd/seqd/verbs"
)

func TestStubOpen(t *testing.T) {
	if !slices.Contains(verbs.Providers(), "ibv") {
		t.Fatalf("provider ibv not registered: have %v", verbs.Providers())
	}
	for _, dev := range []string{"", "mlx5_0", "eth0"} {
		d, err := verbs.Open("ibv", dev, nil)
		if d != nil || err == nil {
			t.Fatalf("Open(ibv, %q) = %v, %v; want an error", dev, d, err)
		}
		if !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("Open(ibv, %q) error %v does not wrap ErrNotSupported", dev, err)
		}
		for _, want := range []string{"built without libibverbs", "-tags ibverbs", "CGO_ENABLED=1", "libibverbs-dev"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(ibv, %q) error %q does not say %q", dev, err, want)
			}
		}
	}
}
