//go:build linux

package worker

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// gettid is the calling thread's ID.
func gettid() int { return unix.Gettid() }

// clockTick is the unit of utime and stime in /proc: USER_HZ, 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ThreadCPU reads the CPU time thread tid of this process has used:
// user and kernel time from /proc/self/task/<tid>/stat (USER_HZ ticks),
// and the scheduler's exact run time from .../schedstat.
func ThreadCPU(tid int) (CPU, error) {
	var c CPU
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return c, err
	}
	// Fields after the command name (which may hold spaces) in its
	// parentheses: state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return c, fmt.Errorf("thread %d stat: no command name", tid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return c, fmt.Errorf("thread %d stat: %d fields", tid, len(f))
	}
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return c, fmt.Errorf("thread %d stat: utime %q stime %q", tid, f[11], f[12])
	}
	c.User, c.Sys = time.Duration(ut)*clockTick, time.Duration(st)*clockTick
	if s, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid)); err == nil {
		if f := bytes.Fields(s); len(f) > 0 {
			if ns, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
				c.Run = time.Duration(ns)
			}
		}
	}
	return c, nil
}
