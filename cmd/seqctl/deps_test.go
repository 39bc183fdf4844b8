package main

import (
	"testing"

	"github.com/seqd/seqd/internal/depstest"
)

// TestLinksNoAdminServer (issue 28): seqctl linked the admin server
// (package admin) for the forwarding aliases of adminclient's names
// and admin.DefaultAddr. It must import only the client side.
func TestLinksNoAdminServer(t *testing.T) {
	depstest.Forbid(t, ".", []string{"github.com/seqd/seqd/admin", "github.com/seqd/seqd/server", "go.etcd.io"},
		[]string{"github.com/seqd/seqd/admin/adminclient", "github.com/seqd/seqd/admin/adminpb", "github.com/seqd/seqd/admin/handshake"})
}
