//go:build !unix

package adminclient

import "os"

// ownedByRoot is false where file ownership is not a uid.
func ownedByRoot(os.FileInfo) bool { return false }
