//go:build !linux

package loadgen

import "fmt"

func pinProcess(cores []int) error {
	if len(cores) == 0 {
		return nil
	}
	return fmt.Errorf("%w: -cores needs Linux", ErrConfig)
}

func unpinned(start func() error) error { return start() }
