//go:build !unix

package client_test

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }

// switches is not measured here.
func switches() int64 { return 0 }
