package client_test

import (
	"testing"

	"github.com/seqd/seqd/internal/depstest"
)

// TestLeanDeps: the client links what a client needs and nothing of the
// server: no Prometheus, no gRPC health or reflection server, no server
// package (the admin server, the modes' servers, the oracle, HA).
func TestLeanDeps(t *testing.T) {
	depstest.Forbid(t, "github.com/seqd/seqd/client", []string{
		"github.com/prometheus",
		"google.golang.org/grpc/health",
		"google.golang.org/grpc/reflection",
		"github.com/seqd/seqd/admin", // the server; admin/adminclient and admin/adminpb are allowed below
		"github.com/seqd/seqd/herd",
		"github.com/seqd/seqd/atomics",
		"github.com/seqd/seqd/headeronly",
		"github.com/seqd/seqd/modes",
		"github.com/seqd/seqd/internal/claim",
		"github.com/seqd/seqd/internal/respq",
		"github.com/seqd/seqd/oracle",
		"github.com/seqd/seqd/ha",
		"github.com/seqd/seqd/server",
		"github.com/seqd/seqd/cmd",
		"github.com/seqd/seqd/fasst",
		"github.com/seqd/seqd/darpc",
		"github.com/seqd/seqd/rfp",
	}, []string{"github.com/seqd/seqd/admin/adminclient", "github.com/seqd/seqd/admin/adminpb"})
}
