//go:build linux

package darpc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// pin binds the calling OS thread (locked by the caller) to core.
func pin(core int) error {
	var set unix.CPUSet
	set.Zero()
	set.Set(core)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("darpc: pin to core %d: %w", core, err)
	}
	return nil
}
