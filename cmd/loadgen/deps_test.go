package main

import (
	"testing"

	"github.com/seqd/seqd/internal/depstest"
)

// TestLinksNoServer (issue 28 item 5): the loadgen command passed
// loadgen/inprocess as its in-process spawner, so that the binary linked
// the server, HA and etcd's client (37.7 MB against seqd's 28.0 MB)
// although -spawn starts the seqd binary next to it. It links the admin
// plane's client side only.
func TestLinksNoServer(t *testing.T) {
	depstest.Forbid(t, ".", []string{"github.com/seqd/seqd/server", "github.com/seqd/seqd/admin",
		"github.com/seqd/seqd/ha", "github.com/seqd/seqd/modes", "github.com/seqd/seqd/loadgen/inprocess",
		"github.com/seqd/seqd/oracle", "go.etcd.io"},
		[]string{"github.com/seqd/seqd/admin/adminclient", "github.com/seqd/seqd/admin/adminpb", "github.com/seqd/seqd/admin/handshake"})
}
