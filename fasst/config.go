package fasst

import (
	"errors"
	"fmt"
	"time"

	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Defaults filled in by Config.validate.
const (
	DefaultMaxWindow  = 64
	DefaultWindow     = 16
	DefaultMaxClients = 256
	// DefaultRecvQueue is the receives each worker's request QP keeps
	// posted; the windows admitted to a worker add up to at most
	// RecvQueue - RecvQueue/8 (the rest is slack for duplicates and
	// retransmissions).
	DefaultRecvQueue = 4096
	// DefaultSpin is how long an idle worker polls before it blocks in
	// CQ.Wait.
	DefaultSpin = 200 * time.Microsecond
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("fasst: invalid config")

// Config configures a Server.
type Config struct {
	// Device, Oracle, Behind, Workers, RespQPs, Cores, Batch,
	// SignalEvery, SendDepth, QKey (of requests), Epoch and Logger, as
	// every CPU mode takes them (package internal/worker).
	wk.Config
	// MaxWindow is the largest window granted: the requests (and values
	// of coalesced callers) in flight per client QP. Default 64, at most
	// spec.FaSSTMaxCount and RecvQueue/2.
	MaxWindow int
	// Format is the oracle's: in the hybrid format (also the zero
	// Format) no request's values span a millisecond boundary
	// (spec.HybridMillisecond).
	Format spec.Format
	// MaxClients is the most sessions. Default 256.
	MaxClients int
	// RecvQueue is the receives each worker's request QP keeps posted.
	// Default 4096.
	RecvQueue int
	// Spin is how long an idle worker polls before it blocks in CQ.Wait.
	// A negative Spin polls forever.
	Spin time.Duration
}

func (c Config) validate() (Config, error) {
	if err := c.Config.Fill(ErrConfig); err != nil {
		return c, err
	}
	if err := wk.Defaults(ErrConfig, wk.Field{Name: "MaxWindow", P: &c.MaxWindow, Default: DefaultMaxWindow},
		wk.Field{Name: "MaxClients", P: &c.MaxClients, Default: DefaultMaxClients},
		wk.Field{Name: "RecvQueue", P: &c.RecvQueue, Default: DefaultRecvQueue}); err != nil {
		return c, err
	}
	if c.RecvQueue < 16 || c.Batch > c.RecvQueue {
		return c, fmt.Errorf("%w: RecvQueue %d below 16 or Batch %d", ErrConfig, c.RecvQueue, c.Batch)
	}
	c.MaxWindow = min(c.MaxWindow, spec.FaSSTMaxCount, c.RecvQueue/2)
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	return c, nil
}

// budget is how many values (and so requests) of admitted windows a
// worker takes.
func (c *Config) budget() int { return c.RecvQueue - c.RecvQueue/8 }

// recvSlot is one receive buffer: the GRH area and room for an oversized
// payload, so that a malformed request is seen (and counted) rather than
// truncated.
const recvSlot = verbs.GRHLen + 2*spec.FaSSTRequestLen
