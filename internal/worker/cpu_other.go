//go:build !linux

package worker

import "errors"

func gettid() int { return 0 }

// ThreadCPU reads a thread's CPU time: only on linux.
func ThreadCPU(tid int) (CPU, error) {
	return CPU{}, errors.New("thread CPU times are only read on linux")
}
