package loadgen

import (
	"time"

	"github.com/seqd/seqd/loadgen/wire"
)

// serverCPU is the CPU time (user + system) process pid has used so far;
// false when it cannot be read (no pid: an in-process or remote seqd
// without -server-pid).
func serverCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	c, err := wire.ReadCPU(pid, 0)
	if err != nil {
		return 0, false
	}
	return c.User + c.Sys, true
}
