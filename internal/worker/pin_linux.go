//go:build linux

package worker

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Pin binds the calling OS thread (locked by the caller) to core.
func Pin(core int) error {
	var set unix.CPUSet
	set.Zero()
	set.Set(core)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to core %d: %w", core, err)
	}
	return nil
}
