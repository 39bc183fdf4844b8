package client

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/verbs"
)

// localAddrFor is the local IPv4 address the kernel would send from to
// reach dst: the source address of its route to dst. It connects a UDP
// socket (which sends nothing) and reads the address the kernel bound.
func localAddrFor(dst netip.Addr) (netip.Addr, error) {
	dst = dst.Unmap()
	if !dst.Is4() || dst.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("%w: no IPv4 route to %v", ErrConfig, dst)
	}
	// The port only completes the address; connect sends no packet.
	conn, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("client: no route to %v: %w", dst, err)
	}
	defer conn.Close()
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	if !local.Is4() || local.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("client: no IPv4 source address for %v (got %v)", dst, local)
	}
	return local, nil
}

// hostAddr resolves the host of an admin address (host:port) to an IPv4
// address.
func hostAddr(ctx context.Context, hostport string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: admin address %q: %v", ErrConfig, hostport, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("%w: resolve admin host %q: %v", ErrUnavailable, host, err)
	}
	return ips[0].Unmap(), nil
}

// routeDevice is the soft device (IP:0) the client binds when no
// WithDevice chose one: the local address of the route to dst.
func routeDevice(dst netip.Addr) (string, error) {
	local, err := localAddrFor(dst)
	if err != nil {
		return "", err
	}
	return netip.AddrPortFrom(local, 0).String(), nil
}

// serverDataIP is the IP address of the server's first data-plane queue
// pair in a Connect answer (any mode), the zero Addr when it names none.
func serverDataIP(resp *adminpb.ConnectResponse) netip.Addr {
	eps := resp.GetServerQps()
	if len(eps) == 0 {
		eps = resp.GetServerConnQps()
	}
	for _, ep := range eps {
		var a verbs.Address
		if a.UnmarshalBinary(ep.GetAddress()) == nil {
			return a.GID.Addr().Unmap()
		}
	}
	return netip.Addr{}
}
