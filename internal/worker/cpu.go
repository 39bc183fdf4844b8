package worker

import (
	"fmt"
	"time"
)

// CPU is the processor time a thread used: in user space, in the kernel
// (both in USER_HZ ticks, 10 ms, as /proc counts them) and in all, as
// the scheduler measures it to the nanosecond (0 where unknown).
type CPU struct {
	User, Sys, Run time.Duration
}

// Sub is the time used between an earlier reading o and c.
func (c CPU) Sub(o CPU) CPU { return CPU{c.User - o.User, c.Sys - o.Sys, c.Run - o.Run} }

// PerOp splits the time used over n operations into user and kernel
// nanoseconds each: the scheduler's total where known, divided in the
// ratio of the ticks (which are too coarse to divide alone).
func (c CPU) PerOp(n uint64) (user, sys float64) {
	if n == 0 {
		return 0, 0
	}
	total := float64(c.Run)
	ticks := float64(c.User + c.Sys)
	if total == 0 {
		total = ticks
	}
	if ticks == 0 {
		return total / float64(n), 0
	}
	return total * float64(c.User) / ticks / float64(n), total * float64(c.Sys) / ticks / float64(n)
}

func (c CPU) String() string {
	return fmt.Sprintf("user %v sys %v run %v", c.User, c.Sys, c.Run)
}
