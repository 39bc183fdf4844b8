package herd

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seqd/seqd/internal/claim"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Claimer is the oracle as the data path uses it (package internal/claim).
type Claimer = claim.Claimer

// Defaults filled in by Config.validate.
const (
	DefaultWorkers     = 1
	DefaultRespQPs     = 3
	DefaultMaxWindow   = 64
	DefaultWindow      = 16
	DefaultMaxQPs      = 256
	DefaultBatch       = 64
	DefaultSignalEvery = 32
	DefaultSendDepth   = 1024
	DefaultSpin        = 200 * time.Microsecond
	DefaultMaxSleep    = 500 * time.Microsecond
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("herd: invalid config")

// Config configures a Server.
type Config struct {
	// Device the server's QPs and request regions live on. Required.
	Device verbs.Device
	// Oracle hands out values. Required.
	Oracle Claimer
	// Behind is the error Oracle.Claim returns when persistence lags
	// (oracle.ErrBehind): the batch is kept and the claim retried.
	Behind error
	// Workers is the number of polling workers. Default 1.
	Workers int
	// RespQPs is the number of response UD QPs per worker. Default 3.
	RespQPs int
	// Cores pins worker i to Cores[i]; -1 or a missing entry leaves it
	// unpinned.
	Cores []int
	// MaxWindow is the number of slots per client QP (the largest window
	// granted). Default 64, at most spec.HERDMaxWindow.
	MaxWindow int
	// MaxQPs is the most client QPs per worker: its region holds
	// MaxQPs×MaxWindow slots. Default 256.
	MaxQPs int
	// Batch is the most requests one batch answers. Default 64.
	Batch int
	// SignalEvery: one send work request in SignalEvery is signaled.
	SignalEvery int
	// SendDepth is the send queue depth of each response QP.
	SendDepth int
	// Spin is how long an idle worker keeps polling before it backs off
	// into short sleeps (up to MaxSleep). A negative Spin polls forever,
	// as a core-pinned worker on a real NIC should.
	Spin     time.Duration
	MaxSleep time.Duration
	// QKey of the response packets. Default verbs.DefaultQKey.
	QKey uint32
	// Epoch identifies this server run. Default: the start time in ns.
	Epoch uint64
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) validate() (Config, error) {
	if c.Device == nil || c.Oracle == nil {
		return c, fmt.Errorf("%w: Device and Oracle are required", ErrConfig)
	}
	for _, f := range []struct {
		p    *int
		d    int
		name string
	}{
		{&c.Workers, DefaultWorkers, "Workers"}, {&c.RespQPs, DefaultRespQPs, "RespQPs"},
		{&c.MaxWindow, DefaultMaxWindow, "MaxWindow"}, {&c.MaxQPs, DefaultMaxQPs, "MaxQPs"},
		{&c.Batch, DefaultBatch, "Batch"}, {&c.SignalEvery, DefaultSignalEvery, "SignalEvery"},
		{&c.SendDepth, DefaultSendDepth, "SendDepth"},
	} {
		if *f.p == 0 {
			*f.p = f.d
		}
		if *f.p < 0 {
			return c, fmt.Errorf("%w: %s %d is negative", ErrConfig, f.name, *f.p)
		}
	}
	if c.MaxWindow > spec.HERDMaxWindow {
		return c, fmt.Errorf("%w: MaxWindow %d above the protocol's %d", ErrConfig, c.MaxWindow, spec.HERDMaxWindow)
	}
	if c.SendDepth < 2*c.Batch || c.SignalEvery > c.SendDepth/2 {
		return c, fmt.Errorf("%w: SendDepth %d must be at least 2*Batch (%d) and 2*SignalEvery (%d)", ErrConfig, c.SendDepth, c.Batch, c.SignalEvery)
	}
	if len(c.Cores) > c.Workers {
		return c, fmt.Errorf("%w: %d cores for %d workers", ErrConfig, len(c.Cores), c.Workers)
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.MaxSleep <= 0 {
		c.MaxSleep = DefaultMaxSleep
	}
	if c.QKey == 0 {
		c.QKey = verbs.DefaultQKey
	}
	if c.Epoch == 0 {
		c.Epoch = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func (c Config) core(i int) int {
	if i < len(c.Cores) {
		return c.Cores[i]
	}
	return -1
}
