//go:build !linux

package worker

import "fmt"

// Pin binds the calling OS thread to core: only on linux.
func Pin(core int) error {
	return fmt.Errorf("pinning to core %d is only supported on linux", core)
}
