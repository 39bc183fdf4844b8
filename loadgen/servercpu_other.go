//go:build !linux

package loadgen

import "time"

// serverCPU is not measured off Linux.
func serverCPU(int) (time.Duration, bool) { return 0, false }
