package main

import (
	"context"
	"fmt"

	"github.com/seqd/seqd/internal/version"
)

// runVersion prints the version stamped into seqctl at build time. It does
// not contact the server: `seqctl status` shows the server's version.
func runVersion(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", args)}
	}
	fmt.Fprintln(e.stdout, "seqctl", version.Version)
	return nil
}
