package client_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// procCPU is the CPU time process pid's live threads used so far: the
// sum of their run times in /proc/PID/task/*/schedstat (nanoseconds, user
// and system). ok is false when it cannot be read.
func procCPU(pid int) (time.Duration, bool) {
	dirs, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "schedstat"))
	if err != nil || len(dirs) == 0 {
		return 0, false
	}
	var t time.Duration
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that exited meanwhile
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			return 0, false
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		t += time.Duration(ns)
	}
	return t, true
}
