package loadgen

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// origMask is the process's affinity before pinProcess, for children.
var (
	origMu   sync.Mutex
	origMask *unix.CPUSet
)

// pinProcess restricts every thread of this process to cores. Threads
// made later inherit the mask from the thread that creates them.
func pinProcess(cores []int) error {
	if len(cores) == 0 {
		return nil
	}
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err == nil {
		origMu.Lock()
		if origMask == nil {
			origMask = &orig
		}
		origMu.Unlock()
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

// unpinned runs start (which forks a child) on a thread with the
// process's original affinity, so that a spawned seqd is not confined to
// loadgen's cores: a child inherits the mask of the thread that forks it.
func unpinned(start func() error) error {
	origMu.Lock()
	orig := origMask
	origMu.Unlock()
	if orig == nil {
		return start()
	}
	runtime.LockOSThread()
	var cur unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cur); err != nil {
		runtime.UnlockOSThread()
		return start()
	}
	if err := unix.SchedSetaffinity(0, orig); err != nil {
		runtime.UnlockOSThread()
		return start()
	}
	err := start()
	if unix.SchedSetaffinity(0, &cur) == nil {
		runtime.UnlockOSThread()
	} // else the thread keeps the wide mask and dies with the goroutine
	return err
}
