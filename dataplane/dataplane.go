// Package dataplane is the shape every seqd mode takes on the server.
//
// A mode (spec-s0, herd, atomics, fasst, darpc, rfp) lives in a folder of
// its own and exposes one Start function of type Factory. The Mode it
// returns admits and releases sessions, serves them on its own goroutines,
// reports Stats and stops. It speaks Go values only: package modes is the
// one package that translates them to and from the admin protocol
// (adminpb), keeps the registry of modes, and turns Stats into metrics.
//
// Adding a mode takes one server folder implementing Mode, one client
// file (client/<mode>.go) and one registration line in each registry
// (modes.registry, client.transports).
package dataplane

import (
	"context"
	"errors"
	"log/slog"

	"github.com/seqd/seqd/internal/hist"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The kinds of error a Mode returns, wrapped with detail. Package modes
// maps each to the admin error (and gRPC code) of the same name.
var (
	// ErrUnavailable: the mode is stopping or failed; try again later.
	ErrUnavailable = errors.New("unavailable")
	// ErrNoCapacity: admitting the session would exceed a limit.
	ErrNoCapacity = errors.New("no capacity")
	// ErrInvalidArgument: the admission request is malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition: well formed, but not for this mode or state
	// (a QP already connected, the wrong QP kinds).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnknownSession: no such session in this mode and epoch.
	ErrUnknownSession = errors.New("unknown session")
)

// Endpoint names a queue pair: its address and number.
type Endpoint struct {
	Addr verbs.Address
	QPN  verbs.QPN
}

// Admission is a client's request to be admitted (ConnectRequest in Go
// values; the protocol version and mode name were checked by modes).
type Admission struct {
	Name string
	// Window is the outstanding requests asked for per client QP (0: the
	// mode's default). The mode grants at most its maximum.
	Window int
	// QPs are the client's QPs: those the server answers (UD) or
	// connects to (RC, UC). ConnQPs is a second set for modes that need
	// two kinds (herd: the UC QPs that WRITE requests).
	QPs, ConnQPs []Endpoint
	// Identities are the caller's verified identities (its admin-plane
	// client certificate's); empty for an anonymous caller. A mode that
	// cannot hold every client to its protocol admits only trusted ones
	// (atomics on a NIC).
	Identities []string
}

// SessionRef names one session of one epoch (DisconnectRequest, and the
// session a Connect replaces).
type SessionRef struct {
	ID    uint64
	Epoch uint64
}

// Grant is what an admitted client learns (ConnectResponse in Go values;
// modes fills in mode, format, protocol version and token). Fields a mode
// does not use stay empty.
type Grant struct {
	Session uint64
	Epoch   uint64
	Window  int
	// QKey is the request Q_Key (the server's request QPs'); AnswerQKey
	// the session's own, carried by every answer.
	QKey, AnswerQKey uint32
	// ServerQPs are the server's request QPs; client QP i sends to
	// ServerQPs[Assignment[i]].
	ServerQPs  []Endpoint
	Assignment []uint32
	// ServerConnQPs are the server's connected QPs (RC/UC), one per
	// client QP, with the first PSN each expects in ConnPSNs.
	ServerConnQPs []Endpoint
	ConnPSNs      []verbs.PSN
	// AnswerQPs are the QPs answers come from: the client drops any
	// other sender.
	AnswerQPs []Endpoint
	// RemoteAddr and RKey name server memory the client accesses with
	// one-sided verbs (per client QP, or one region).
	RemoteAddr []uint64
	RKey       []uint32
	// High is a recent value (the initial speculation); 0: none.
	High uint64
}

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

// Mode is a running data path.
type Mode interface {
	// Admit admits a session. When replaces names a session this mode
	// and epoch still hold, it is released in the same step, and a on
	// failure keeps it.
	Admit(ctx context.Context, a Admission, replaces SessionRef) (Grant, error)
	// Release releases a session: ErrUnknownSession when there is none.
	Release(ctx context.Context, s SessionRef) error
	Stats() Stats
	// Stop drains the mode and moves its QPs to ERR; it returns the
	// highest value the mode could have handed out outside the oracle
	// (0 for modes that claim every value from the oracle).
	Stop() (high uint64, err error)
	Close() error
}

// Claimer hands out values: the oracle, or a test's fake.
type Claimer interface {
	// Claim reserves n consecutive values and returns the first.
	Claim(n int) (first uint64, err error)
	// Current is the last value handed out.
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
}

// Factory starts a mode.
type Factory func(ctx context.Context, cfg Config) (Mode, error)

// ReleaseReplaced releases the session r names (none when r.ID is 0) for
// a mode whose sessions never share resources, so that Admit may release
// the session it replaces before it admits the new one. A session
// already gone is no error.
func ReleaseReplaced(ctx context.Context, m Mode, r SessionRef) error {
	if r.ID == 0 {
		return nil
	}
	if err := m.Release(ctx, r); err != nil && !errors.Is(err, ErrUnknownSession) {
		return err
	}
	return nil
}
