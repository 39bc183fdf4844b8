package fasst

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Defaults filled in by config.
const (
	DefaultWorkers    = 1
	DefaultRespQPs    = 3
	DefaultMaxWindow  = 64
	DefaultWindow     = 16
	DefaultMaxClients = 256
	// DefaultRecvQueue is the receives each worker's request QP keeps
	// posted; the windows admitted to a worker add up to at most
	// RecvQueue - RecvQueue/8 (the rest is slack for duplicates and
	// clients that overrun their window).
	DefaultRecvQueue   = 4096
	DefaultBatch       = 64
	DefaultSignalEvery = 32
	DefaultSendDepth   = 1024
	// DefaultSpin is how long an idle worker polls before it blocks in
	// CQ.Wait.
	DefaultSpin = 200 * time.Microsecond
)

// recvSlot is one receive buffer: the GRH area and room for an oversized
// payload, so that a malformed request is seen (and counted) rather than
// truncated.
const recvSlot = verbs.GRHLen + 2*spec.FaSSTRequestLen

// config is the mode's configuration with every default filled in.
type config struct {
	dataplane.Config
	recvQueue, batch, signalEvery, sendDepth int
	spin                                     time.Duration
}

func newConfig(c dataplane.Config) (config, error) {
	if c.Device == nil || c.Oracle == nil {
		return config{}, fmt.Errorf("%w: fasst: Device and Oracle are required", dataplane.ErrInvalidArgument)
	}
	def := func(p *int, d int) {
		if *p <= 0 {
			*p = d
		}
	}
	def(&c.Workers, DefaultWorkers)
	def(&c.RespQPs, DefaultRespQPs)
	def(&c.MaxWindow, DefaultMaxWindow)
	def(&c.MaxClients, DefaultMaxClients)
	c.MaxWindow = min(c.MaxWindow, spec.FaSSTMaxCount, DefaultRecvQueue/2)
	if len(c.Cores) > c.Workers {
		return config{}, fmt.Errorf("%w: fasst: %d cores for %d workers", dataplane.ErrInvalidArgument, len(c.Cores), c.Workers)
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
	return config{Config: c, recvQueue: DefaultRecvQueue, batch: DefaultBatch, signalEvery: DefaultSignalEvery,
		sendDepth: DefaultSendDepth, spin: DefaultSpin}, nil
}

// budget is how many values (and so requests) of admitted windows a
// worker takes.
func (c *config) budget() int { return c.recvQueue - c.recvQueue/8 }

func (c *config) core(i int) int {
	if i < len(c.Cores) {
		return c.Cores[i]
	}
	return -1
}
