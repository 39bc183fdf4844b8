//go:build linux

package reload

import (
	"os"
	"syscall"
	"time"
)

// sysStat returns fi's status-change time, device and inode.
func sysStat(fi os.FileInfo) (chg time.Time, dev, ino uint64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, 0, 0
	}
	return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)), uint64(st.Dev), uint64(st.Ino)
}
