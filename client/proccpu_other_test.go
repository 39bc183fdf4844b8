//go:build !linux

package client_test

import "time"

// procCPU is not measured here.
func procCPU(pid int) (time.Duration, bool) { return 0, false }
