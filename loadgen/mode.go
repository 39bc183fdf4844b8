package loadgen

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqd/seqd/admin/adminpb"
)

// ErrModeSwitch reports that the server cannot be switched to a mode.
var ErrModeSwitch = errors.New("loadgen: mode switching not available")

// switchMode makes the server at adm serve mode. It succeeds at once when
// the server already serves it. The admin API has no SetMode yet: any
// other mode is ErrModeSwitch (with -spawn, loadgen restarts its own seqd
// in the mode instead).
func switchMode(ctx context.Context, adm adminpb.AdminClient, mode string) error {
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		return fmt.Errorf("loadgen: status: %w", err)
	}
	if st.GetMode() == mode {
		return nil
	}
	return fmt.Errorf("%w: seqd serves %q and its admin API has no SetMode to switch to %q", ErrModeSwitch, st.GetMode(), mode)
}
