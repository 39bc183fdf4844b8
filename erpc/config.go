package erpc

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
	DefaultMaxCredits = 32
	DefaultMaxClients = 4096
	// DefaultRecvQueue is the receives each worker's request QP keeps
	// posted; the credits admitted to a worker add up to at most
	// RecvQueue - RecvQueue/8 (the rest is slack for duplicates, pings
	// and false retransmissions). 32768, as the other modes' workers
	// (headeronly.DefaultMaxRecv): the most work requests a queue of the
	// soft provider and of common RDMA NICs holds; 20,000 sessions of
	// one credit fit one worker (the device's receive buffer must hold
	// them too: the soft provider's rcvbuf option).
	DefaultRecvQueue = 32768
	// DefaultSpin is how long an idle worker polls before it blocks.
	DefaultSpin = 200 * time.Microsecond
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("erpc: invalid config")

// Config configures a Server.
type Config struct {
	// The configuration every CPU mode takes (package internal/worker).
	wk.Config
	// MaxCredits is the most credits a session is granted. Default 32,
	// at most spec.ERPCMaxCredits.
	MaxCredits int
	// Format is the oracle's (spec.HybridMillisecond: no request's
	// values span a millisecond boundary).
	Format spec.Format
	// MaxClients is the most client QPs (session endpoints). Default 4096.
	MaxClients int
	// RecvQueue is the receives each worker's request QP keeps posted.
	RecvQueue int
	// Spin is how long an idle worker polls before it blocks in CQ.Wait;
	// negative: forever.
	Spin time.Duration
	// RecvBuffer overrides the device's receive buffer, in datagrams
	// (tests); 0: ask the device (verbs.RecvBufferer).
	RecvBuffer int
}

func (c Config) validate() (Config, error) {
	if err := c.Config.Fill(ErrConfig); err != nil {
		return c, err
	}
	if err := wk.Defaults(ErrConfig, wk.Field{Name: "MaxCredits", P: &c.MaxCredits, Default: DefaultMaxCredits},
		wk.Field{Name: "MaxClients", P: &c.MaxClients, Default: DefaultMaxClients},
		wk.Field{Name: "RecvQueue", P: &c.RecvQueue, Default: DefaultRecvQueue}); err != nil {
		return c, err
	}
	if c.RecvQueue < 16 || c.Batch > c.RecvQueue {
		return c, fmt.Errorf("%w: RecvQueue %d below 16 or Batch %d", ErrConfig, c.RecvQueue, c.Batch)
	}
	c.MaxCredits = min(c.MaxCredits, spec.ERPCMaxCredits, c.budget())
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	return c, nil
}

// budget is how many credits of admitted sessions a worker's posted
// receives take.
func (c *Config) budget() int { return c.RecvQueue - c.RecvQueue/8 }

// deviceBuffer is how many requests the device's receive buffer holds
// for all workers (verbs.RecvBufferer), -1 for no limit.
func (c *Config) deviceBuffer() int {
	if c.RecvBuffer > 0 {
		return c.RecvBuffer
	}
	if b, ok := c.Device.(verbs.RecvBufferer); ok {
		n := b.RecvBuffer(spec.ERPCRequestLen)
		return n - n/8
	}
	return -1
}

// recvSlot is one receive buffer: the GRH and room for an oversized
// payload, so that a malformed request is seen (and counted).
const recvSlot = verbs.GRHLen + 2*spec.ERPCAnswerLen
