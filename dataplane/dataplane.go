// Package dataplane is the shape every seqd mode takes on the server.
//
// A mode (spec-s0, herd, atomics, fasst, darpc, rfp) lives in a folder of
// its own and exposes one Start function of type Factory. The Mode it
// returns admits and releases sessions, serves them on its own goroutines,
// reports Stats and stops. It speaks Go values only: the handshake's
// (admin/handshake: Admission, Grant, SessionRef, whose one translation
// to and from the admin protocol is there) and its own. Package modes
// keeps the registry of modes and turns Stats into metrics.
//
// Adding a mode takes one server folder implementing Mode, one client
// file (client/<mode>.go) and one registration line in each registry
// (modes.registry, client.transports).
package dataplane

import (
	"context"
	"log/slog"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/hist"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The kinds of error a Mode returns, wrapped with detail: the
// handshake's (one definition each, handshake.ErrUnavailable ...).
// Package modes maps each to the admin error (and gRPC code) of the same
// name.
var (
	ErrUnavailable        = handshake.ErrUnavailable
	ErrNoCapacity         = handshake.ErrNoCapacity
	ErrInvalidArgument    = handshake.ErrInvalidArgument
	ErrFailedPrecondition = handshake.ErrFailedPrecondition
	ErrUnknownSession     = handshake.ErrUnknownSession
)

// Stats are a mode's statistics at one moment (StatusResponse and the
// metrics, in Go values).
type Stats struct {
	Sessions int
	// Current is the highest value the mode handed out, when the mode
	// knows better than the oracle (atomics); 0 otherwise.
	Current                                                 uint64
	Served, Batches, SpecMisses, Retransmits, Drops, Stalls uint64
	Workers                                                 []WorkerStats
	// ServiceTime samples the time from a batch's oldest request arriving
	// to its answers' doorbell (seconds), for modes whose workers answer;
	// empty otherwise.
	ServiceTime hist.Snapshot
	// Counters are the mode's own counters, exported as
	// seqd_<mode>_<Name> (with a reason label when Reason is set).
	Counters []Counter
}

// WorkerStats are one worker's statistics.
type WorkerStats struct {
	ID, Core                                          int
	Batches, Requests, SpecMisses, Retransmits, Drops uint64
}

// Counter is one monotonic counter of a mode (or, with Gauge, a level
// that goes up and down).
type Counter struct {
	Name, Help, Reason string
	Value              uint64
	Gauge              bool
}

// Summarizer is a Mode whose Stats includes Counters that walk every
// session (a gauge over them): Summary is Stats without those, what
// Status reports. Clients call Status before every Connect, a thousand
// of them at once after a failover, so it must not cost a walk of the
// session table each, nor wait for the lock Connects hold.
type Summarizer interface {
	Summary() Stats
}

// Mode is a running data path. The mode is the one layer that checks the
// epoch of a SessionRef: a ref whose Epoch is not the one the mode was
// started with (Config.Epoch) names no session, whatever its ID, so that
// a session of an earlier start is never taken for one of this start
// that got the same ID. Package dataplane/dataplanetest is the suite
// every mode passes.
type Mode interface {
	// Admit admits a session. When replaces names a session this mode
	// and epoch still hold, it is released in the same step, and a
	// refused admission keeps it.
	Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error)
	// Release releases a session of the mode's epoch: ErrUnknownSession
	// when there is none.
	Release(ctx context.Context, s handshake.SessionRef) error
	Stats() Stats
	// Stop drains the mode and moves its QPs to ERR; it returns the
	// highest value the mode could have handed out outside the oracle
	// (0 for modes that claim every value from the oracle).
	Stop() (high uint64, err error)
	Close() error
}

// Claimer is the oracle as every mode uses it (package oracle's Oracle,
// or a test's fake: internal/claimtest). It is the one definition: the
// worker's batch claims (internal/claim) and each mode's own uses take
// it, and a mode that needs more asks for it as an optional capability
// (claim.AtClaimer, atomics.Leaser).
type Claimer interface {
	// Claim reserves n consecutive values, each above every value handed
	// out before, and returns the first, or an error; it never blocks.
	Claim(n int) (first uint64, err error)
	// Current is the last value handed out (0: none yet).
	Current() uint64
}

// Config is what modes hands every mode at Start.
type Config struct {
	Device verbs.Device
	Oracle Claimer
	// Behind is the error Oracle.Claim returns while persistence lags:
	// the worker retries it within the request's residence bound.
	Behind error
	Format spec.Format
	// Workers, RespQPs, Cores, MaxWindow, MaxClients as the modes take
	// them (zero: each mode's default).
	Workers, RespQPs      int
	Cores                 []int
	MaxWindow, MaxClients int
	Logger                *slog.Logger
	// Epoch names this start of the mode: it changes on every start.
	Epoch uint64
	// QKey is the Q_Key of requests, handed out at Connect.
	QKey uint32
	// AtomicsBlock is the atomics lease size (0: the mode's default).
	AtomicsBlock int
	// AtomicsTrusted are the identities atomics admits when its provider
	// cannot refuse a client's other atomics (see atomics.Config.Trusted).
	AtomicsTrusted []string
	// MaxSessionRecv caps one session's QPs × window (0: a quarter of a
	// worker's receive budget; negative: no cap); see worker.SessionCap.
	MaxSessionRecv int
	// SharedRecv gives spec-s0 one request QP per worker, its receives
	// shared by the worker's client QPs, instead of one per client QP
	// (headeronly.Config.SharedRecv). Other modes ignore it.
	SharedRecv bool
}

// Factory starts a mode.
type Factory func(ctx context.Context, cfg Config) (Mode, error)
