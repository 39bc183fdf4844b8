package admin

import "net"

// isLoopback reports whether a listener address is on loopback.
func isLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return a.Network() == "unix"
}
