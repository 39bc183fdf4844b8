// Package version holds the build's version, stamped by the Makefile with
// -ldflags -X.
package version

// Version is the seqd release, or "dev" for an unstamped build.
var Version = "dev"
