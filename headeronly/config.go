package headeronly

import (
	"errors"
	"fmt"
	"time"

	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
)

// Defaults filled in by Config.validate.
const (
	DefaultMaxWindow = 256
	// DefaultMaxClients: a session costs 340 B to 630 B of server heap
	// with a shared receive queue (e2e TestDefaultMaxClients,
	// TestManyClientsMemory), and about 2.3 to 2.6 KiB with a request QP
	// of its own per client QP (the default), so 16384 sessions take
	// about 40 MiB. MaxRecv bounds the sum of their windows per worker.
	DefaultMaxClients = 16384
	// DefaultMaxRecv: 32768 receives per worker, the most work requests
	// a queue of the soft provider (and of common RDMA NICs) holds: 512
	// client QPs at window 64, 4096 at window 8.
	DefaultMaxRecv   = 32768
	DefaultRecvSlack = 1024
	DefaultSpin      = 200 * time.Microsecond
	DefaultWindow    = 64
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("headeronly: invalid config")

// The request queue layouts, as seqd's -spec-s0-recv names them.
const (
	// RecvPerSession: a request QP of its own per admitted client QP,
	// with exactly its window of receives (Config.SharedRecv false).
	RecvPerSession = "per-session"
	// RecvShared: one request QP per worker, its receives shared by the
	// worker's client QPs (Config.SharedRecv true).
	RecvShared = "shared"
)

// ParseRecv reads a request queue layout, RecvPerSession or RecvShared,
// into Config.SharedRecv. The empty string is RecvPerSession, the
// default.
func ParseRecv(s string) (shared bool, err error) {
	switch s {
	case "", RecvPerSession:
		return false, nil
	case RecvShared:
		return true, nil
	}
	return false, fmt.Errorf("%w: request queues %q: want %s or %s", ErrConfig, s, RecvPerSession, RecvShared)
}

// recvName names the layout shared selects, as ParseRecv reads it.
func recvName(shared bool) string {
	if shared {
		return RecvShared
	}
	return RecvPerSession
}

// Config configures a Server.
type Config struct {
	// Device, Oracle, Behind, Workers, RespQPs, Cores, Batch,
	// SignalEvery, SendDepth, QKey, Epoch and Logger, as every CPU mode
	// takes them (package internal/worker).
	wk.Config
	// Format of the values, reported to clients. Default spec.FormatHybrid.
	Format spec.Format
	// MaxWindow is the largest window granted per client QP. Default 256.
	MaxWindow int
	// MaxClients is the most concurrent sessions. Default
	// DefaultMaxClients.
	MaxClients int
	// MaxRecv is the largest receive budget of one worker: the sum of the
	// windows of its client QPs may not exceed it. Default
	// DefaultMaxRecv. The worker's receive CQ has room for 2*MaxRecv
	// (receives and answers' completions).
	MaxRecv int
	// RecvSlack is how many receive buffers a worker keeps posted beyond
	// the sum of its clients' windows (up to MaxRecv), so that a client
	// sending beyond its window, or a burst of packets that are not
	// requests at all, does not use up the receives that well-behaved
	// clients' requests need. The buffers exist anyway (MaxRecv of them
	// are registered per worker); posting them costs nothing. Default
	// 1024; negative posts only the windows.
	RecvSlack int
	// SharedRecv makes every client QP of a worker send to the worker's
	// one request QP, whose receive queue is sized as the sum of their
	// windows plus RecvSlack (one QP per worker, as in FaSST). A client
	// that sends beyond its window can then use up receives that other
	// clients' requests need. By default (false) each admitted client QP
	// gets a request QP of its own, with exactly its window of receives,
	// on its worker's receive CQ: a client can use up only its own
	// receives, and never has more than its window of requests at the
	// server. spec/PROTOCOL.md ("Residence and windows") weighs the two.
	SharedRecv bool
	// Spin is how long an idle worker busy-polls before it blocks.
	// Default DefaultSpin.
	Spin time.Duration
}

func (c Config) validate() (Config, error) {
	if err := c.Config.Fill(ErrConfig); err != nil {
		return c, err
	}
	if err := wk.Defaults(ErrConfig, wk.Field{Name: "MaxWindow", P: &c.MaxWindow, Default: DefaultMaxWindow},
		wk.Field{Name: "MaxClients", P: &c.MaxClients, Default: DefaultMaxClients},
		wk.Field{Name: "MaxRecv", P: &c.MaxRecv, Default: DefaultMaxRecv}); err != nil {
		return c, err
	}
	switch {
	case c.RecvSlack == 0:
		c.RecvSlack = DefaultRecvSlack
	case c.RecvSlack < 0:
		c.RecvSlack = 0
	}
	if c.Format == 0 {
		c.Format = spec.FormatHybrid
	}
	if c.MaxWindow > spec.MaxWindow {
		return c, fmt.Errorf("%w: MaxWindow %d above the protocol's %d", ErrConfig, c.MaxWindow, spec.MaxWindow)
	}
	if a := c.Device.Attr(); a.MaxQPWR > 0 && (c.MaxRecv > a.MaxQPWR || c.SendDepth > a.MaxQPWR) {
		return c, fmt.Errorf("%w: MaxRecv %d / SendDepth %d above the device's %d work requests", ErrConfig, c.MaxRecv, c.SendDepth, a.MaxQPWR)
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	return c, nil
}
