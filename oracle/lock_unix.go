//go:build unix

package oracle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// dirLock is an exclusive flock on a data directory's LockFileName, held
// from lockDir to release. The kernel drops it when the process dies, so a
// crash never leaves a directory locked.
type dirLock struct{ f *os.File }

// lockDir locks dir, or fails with ErrLocked naming the holder that the
// lock file records. flock locks belong to an open file description, so a
// second lockDir in the same process fails too.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, markFilePerm)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%w: %s is not writable: opening the lock file: %w", ErrDataDir, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: opening the lock file: %w", ErrDataDir, dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		holder, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("%w: %s is in use by %s (lock file %s): stop that seqd first, or give this one a data directory of its own; two on one directory would serve the same values",
			ErrLocked, dir, describeHolder(holder), path)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: locking %s: %w", ErrDataDir, dir, path, err)
	}
	host, _ := os.Hostname()
	rec := fmt.Sprintf("pid=%d host=%s started=%s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(rec), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: writing the lock file: %w", ErrDataDir, dir, err)
	}
	return &dirLock{f: f}, nil
}

// release unlocks and closes the lock file. It leaves the file in place:
// removing it would let a third opener lock a new file while a second
// still waits on the old one.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// describeHolder renders a lock file's record ("pid=1 host=h
// started=...") for an error message.
func describeHolder(b []byte) string {
	rec := map[string]string{}
	for _, kv := range strings.Fields(string(b)) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			rec[k] = v
		}
	}
	if rec["pid"] == "" {
		return "another process (it has not recorded itself in the lock file yet)"
	}
	return fmt.Sprintf("pid %s on host %s, started %s", rec["pid"], rec["host"], rec["started"])
}
