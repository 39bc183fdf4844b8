package loadgen

import (
	"time"

	"github.com/seqd/seqd/verbs/echo"
)

// The echo floor: what the transport alone can do on this machine, in the
// same run as the modes (package verbs/echo, the same measurement as
// make bench-verbs).

// ErrEcho reports that an echo could not be measured.
var ErrEcho = echo.ErrEcho

// Echo is the measured floor, in round trips per second.
type Echo struct {
	Provider float64 // the verbs provider's header-only UD echo
	RawUDP   float64 // raw UDP sockets with GSO/GRO: echo_floor_ops
}

// MeasureEcho measures both echoes for d each.
func MeasureEcho(provider, device string, d time.Duration) (Echo, error) {
	var e Echo
	rate := func(cli, srv echo.Side, err error) (float64, error) {
		if err != nil {
			return 0, err
		}
		defer cli.Close()
		defer srv.Close()
		n, el, err := echo.Run(cli, srv, 0, d)
		if err != nil {
			return 0, err
		}
		return float64(n) / el.Seconds(), nil
	}
	var err error
	if e.Provider, err = rate(echo.VerbsPair(provider, device, nil)); err != nil {
		return e, err
	}
	e.RawUDP, err = rate(echo.RawPair())
	return e, err
}
