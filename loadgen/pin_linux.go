package loadgen

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinProcess restricts every thread of this process to cores. Threads
// made later inherit the mask from the thread that creates them.
func pinProcess(cores []int) error {
	if len(cores) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, c := range cores {
		set.Set(c)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("loadgen: pin: %w", err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("loadgen: pin thread %d to %v: %w", tid, cores, err)
		}
	}
	return nil
}
