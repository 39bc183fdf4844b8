package adminclient

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial connects to the admin server at addr (host:port) and waits until the
// connection is ready, so a caller learns at once that the server is not
// there: it fails with ErrUnavailable when the first attempt to connect
// fails, and with ctx's error when ctx ends first.
//
// On loopback Dial uses plaintext by default. Any other address needs
// transport credentials in opts (grpc.WithTransportCredentials with
// ClientTLS), or Insecure() to choose plaintext knowingly; without either
// Dial fails with ErrPlaintextRefused. opts come after the defaults and
// so override them.
//
// addr is one host:port; a list (A,B,C) is a Group's (NewGroup), and Dial
// refuses it with ErrAddress, as it does an address that is not host:port.
func Dial(ctx context.Context, addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if strings.Contains(addr, ",") {
		return nil, fmt.Errorf("%w: %q is a list of addresses: dial one, or the group (adminclient.NewGroup)", ErrAddress, addr)
	}
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	defaults := []grpc.DialOption{grpc.WithUserAgent("seqd-admin")}
	if creds := defaultCreds(addr); creds != nil {
		defaults = append(defaults, grpc.WithTransportCredentials(creds))
	}
	cc, err := grpc.NewClient(addr, append(defaults, opts...)...)
	if err != nil && len(defaults) == 1 && strings.Contains(err.Error(), "no transport security set") {
		return nil, plaintextRefused(addr)
	}
	if err != nil {
		return nil, fmt.Errorf("admin: dial %s: %w", addr, err)
	}
	cc.Connect()
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Ready:
			return cc, nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			cc.Close()
			return nil, fmt.Errorf("%w: dial %s: cannot connect (%s)", ErrUnavailable, addr, st)
		}
		if !cc.WaitForStateChange(ctx, st) {
			cc.Close()
			return nil, fmt.Errorf("admin: dial %s: %w", addr, ctx.Err())
		}
	}
}

// defaultCreds returns the transport credentials Dial uses for addr unless
// the caller passes its own: plaintext on loopback, none (so the caller must
// choose) elsewhere. TLS slots in here.
func defaultCreds(addr string) credentials.TransportCredentials {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if host == "localhost" {
		return insecure.NewCredentials()
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return insecure.NewCredentials()
	}
	return nil
}
