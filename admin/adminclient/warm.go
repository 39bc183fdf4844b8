package adminclient

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// DialBackground starts connecting to the admin server at addr, with
// Dial's defaults, and returns at once; WaitReady waits for the
// connection. A client keeps such connections to the standbys of an HA
// group so that a failover needs no TLS handshake.
func DialBackground(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
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
	return cc, nil
}

// WaitReady waits until cc is ready: ErrUnavailable when it fails to
// connect (or is shut down), ctx's error when ctx ends first. It does
// not close cc.
func WaitReady(ctx context.Context, cc *grpc.ClientConn) error {
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			cc.Connect()
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("%w: dial %s: cannot connect (%s)", ErrUnavailable, cc.Target(), st)
		}
		if !cc.WaitForStateChange(ctx, st) {
			return fmt.Errorf("admin: dial %s: %w", cc.Target(), ctx.Err())
		}
	}
}
