package client_test

import (
	"testing"

	"github.com/seqd/seqd/internal/depstest"
)

// TestLeanDeps: the client links what a client needs and nothing of the
// server. Of seqd's own packages it links only those listed here, each
// for the reason given (an allow-list: a new import fails here until it
// is argued for, where a list of forbidden packages let dataplane, the
// servers' mode interface, in through the handshake types). Of the
// others, no Prometheus and no gRPC health or reflection server.
func TestLeanDeps(t *testing.T) {
	const client = "github.com/seqd/seqd/client"
	depstest.Only(t, client, "github.com/seqd/seqd", map[string]string{
		"github.com/seqd/seqd/spec":                    "the protocol: immediates, windows, speculation, formats, mode names and grant shapes; pure",
		"github.com/seqd/seqd/verbs":                   "the verbs API the data path is written against",
		"github.com/seqd/seqd/verbs/soft":              "the default provider (userspace RoCEv2 over UDP)",
		"github.com/seqd/seqd/verbs/rocev2":            "the soft provider's packet codec",
		"github.com/seqd/seqd/verbs/soft/internal/xsk": "the soft provider's AF_XDP socket (x/sys/unix only); the XDP program and its eBPF loader are in verbs/soft/xdp, not linked here",
		"github.com/seqd/seqd/admin/adminpb":           "the admin plane's messages and gRPC client stub",
		"github.com/seqd/seqd/admin/adminclient":       "dialing the admin plane: credentials, roles, redirects",
		"github.com/seqd/seqd/admin/handshake":         "the Connect exchange's Go values and their one codec; pure",
		"github.com/seqd/seqd/internal/hist":           "the client's latency histogram; pure",
	})
	depstest.Forbid(t, client, []string{
		"github.com/prometheus",
		"github.com/cilium/ebpf",
		"google.golang.org/grpc/health",
		"google.golang.org/grpc/reflection",
	}, nil)
}
