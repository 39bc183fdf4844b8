//go:build unix

package adminclient

import (
	"os"
	"syscall"
)

// ownedByRoot reports whether fi's file belongs to root.
func ownedByRoot(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}
