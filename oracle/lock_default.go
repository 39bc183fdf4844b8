//go:build !unix

package oracle

import (
	"fmt"
	"runtime"
)

// dirLock is not available on this platform: seqd's FileStore needs flock.
type dirLock struct{}

func lockDir(dir string) (*dirLock, error) {
	return nil, fmt.Errorf("%w: %s: no directory lock on %s", ErrDataDir, dir, runtime.GOOS)
}

func (l *dirLock) release() error { return nil }
