package loadgen

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminpb"
)

// ErrModeSwitch reports that the server cannot be switched to a mode, or
// that loadgen's client cannot speak it: the mode is skipped.
var ErrModeSwitch = errors.New("loadgen: mode switching not available")

// switchMode makes the server at adm serve mode through the admin SetMode
// RPC. It does nothing when the server already serves mode. A server that
// does not implement SetMode, or does not know the mode, is ErrModeSwitch;
// with -spawn, loadgen then restarts its own seqd in the mode instead.
func switchMode(ctx context.Context, adm adminpb.AdminClient, mode string) error {
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		return fmt.Errorf("loadgen: status: %w", err)
	}
	if st.GetMode() == mode {
		return nil
	}
	resp, err := adm.SetMode(ctx, &adminpb.SetModeRequest{Mode: mode})
	switch status.Code(err) {
	case codes.OK:
		if resp.GetMode() != mode {
			return fmt.Errorf("%w: SetMode(%q) left the server in %q", ErrModeSwitch, mode, resp.GetMode())
		}
		return nil
	case codes.Unimplemented, codes.InvalidArgument, codes.FailedPrecondition:
		return fmt.Errorf("%w: seqd serves %q and cannot switch to %q: %v", ErrModeSwitch, st.GetMode(), mode, status.Convert(err).Message())
	}
	return fmt.Errorf("loadgen: SetMode(%q): %w", mode, err)
}

// clientMode checks that a client connected in the mode being measured:
// the client follows the server's mode when it connects.
func clientMode(got, mode string) error {
	if got == mode {
		return nil
	}
	return fmt.Errorf("%w: the client connected in %q, not %q", ErrModeSwitch, got, mode)
}
