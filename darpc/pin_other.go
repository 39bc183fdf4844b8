//go:build !linux

package darpc

import "fmt"

// pin binds the calling OS thread to core: only on linux.
func pin(core int) error {
	return fmt.Errorf("darpc: pinning to core %d is only supported on linux", core)
}
