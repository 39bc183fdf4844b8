package loadgen

import (
	"testing"

	"github.com/seqd/seqd/internal/depstest"
)

// TestLinksNoServer (issue 28): loadgen imported server for its
// in-process seqd, so that every loadgen binary linked the server, HA and
// 19 etcd packages. The server now comes in through Config.InProcess.
func TestLinksNoServer(t *testing.T) {
	depstest.Forbid(t, ".", []string{"github.com/seqd/seqd/server", "github.com/seqd/seqd/admin",
		"github.com/seqd/seqd/ha", "github.com/seqd/seqd/modes", "go.etcd.io"},
		[]string{"github.com/seqd/seqd/admin/adminclient", "github.com/seqd/seqd/admin/adminpb", "github.com/seqd/seqd/admin/handshake"})
}
