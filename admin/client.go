package admin

import (
	"net"

	"github.com/seqd/seqd/admin/adminclient"
)

// The client side of the admin plane lives in adminclient (the client
// library, seqctl and loadgen import it without this server). These
// names forward to it for server-side code: the admin server's redirects,
// HA, and tests that dial a server they started.
var (
	Dial            = adminclient.Dial
	RedirectError   = adminclient.RedirectError
	LeaderFromError = adminclient.LeaderFromError
	ClientTLS       = adminclient.ClientTLS
)

// isLoopback reports whether a listener address is on loopback.
func isLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return a.Network() == "unix"
}
