package herd

import (
	"errors"
	"time"

	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
)

// Defaults filled in by Config.validate.
const (
	DefaultMaxWindow = 64
	DefaultWindow    = 16
	DefaultMaxQPs    = 256
	DefaultSpin      = wk.DefaultSpin
	DefaultMaxSleep  = wk.DefaultMaxSleep
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("herd: invalid config")

// Config configures a Server.
type Config struct {
	// Device, Oracle, Behind, Workers, RespQPs, Cores, Batch,
	// SignalEvery, SendDepth, QKey, Epoch and Logger, as every CPU mode
	// takes them (package internal/worker).
	wk.Config
	// MaxWindow is the number of slots per client QP (the largest window
	// granted). Default 64, at most spec.HERDMaxWindow.
	MaxWindow int
	// MaxQPs is the most client QPs per worker: its region holds
	// MaxQPs×MaxWindow slots. Default 256.
	MaxQPs int
	// Spin is how long an idle worker keeps polling before it backs off
	// into short sleeps (up to MaxSleep). A negative Spin polls forever,
	// as a core-pinned worker on a real NIC should.
	Spin     time.Duration
	MaxSleep time.Duration
}

func (c Config) validate() (Config, error) {
	if err := c.Config.Fill(ErrConfig); err != nil {
		return c, err
	}
	if err := wk.FillSlots(ErrConfig, &c.MaxWindow, DefaultMaxWindow, spec.HERDMaxWindow, &c.MaxQPs, DefaultMaxQPs); err != nil {
		return c, err
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.MaxSleep <= 0 {
		c.MaxSleep = DefaultMaxSleep
	}
	return c, nil
}
