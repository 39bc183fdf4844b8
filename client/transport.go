package client

import (
	"context"
	"log/slog"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/verbs"
)

// transport is one mode's data path on the client, as the engine drives
// it. The engine owns the requests and their deadlines and checks every
// value it is handed (accept: never at or below one already returned);
// a transport owns its QPs, its wire format, matching answers to
// requests, and retransmission. Only the engine goroutine calls it.
//
// Request IDs are the engine's: small integers below capacity (the
// number of requests the transport can hold in flight). An ID is in
// flight from the Send that took it until Poll reports it or Cancel
// drops it; the engine reuses it only then.
type transport interface {
	// Free is how many more requests Send would take now.
	Free() int
	// Outstanding is how many requests are in flight.
	Outstanding() int
	// Send sends the requests ids (in this order, oldest first) and
	// returns how many it took: a prefix of ids. It rings as few
	// doorbells as it can (one per QP touched).
	Send(now time.Duration, ids []int) (int, error)
	// Poll moves answers into res and returns how many. A result with
	// Err set failed on the wire (a QP broke): the engine sends it again,
	// after reconnecting if Broken.
	Poll(now time.Duration, res []result) int
	// Expire retransmits requests due and returns how many it resent
	// (transports whose transport retransmits, RC, return 0).
	Expire(now time.Duration) int
	// NextDeadline is when Expire next has work, if ever.
	NextDeadline() (time.Duration, bool)
	// CQ is the queue the engine blocks on when idle (Wait).
	CQ() verbs.CQ
	// Broken reports that the transport cannot send any more: the engine
	// reconnects.
	Broken() bool
	// Cancel drops request id (its caller gave up): an answer that still
	// comes for it is discarded.
	Cancel(id int)
	// Close releases the transport's resources (not the client's PD).
	Close() error
}

// result is one answer a transport hands the engine.
type result struct {
	ID    int
	Value uint64
	Err   error
}

// transportEnv is what a transport's dialer gets from the client.
type transportEnv struct {
	dev verbs.Device
	pd  verbs.PD
	// qps, window and retransmit are the client's options (WithQPs,
	// WithWindow, WithRetransmit); name is WithName's.
	qps, window int
	retransmit  time.Duration
	name        string
	// rfpReads is WithRFPReads' R (0: spec.RFPDefaultReads).
	rfpReads int
	// single: WithCoalescing(0), every call a request of its own (a
	// transport that coalesces callers does not).
	single bool
	// cc: WithCongestionControl(true); linkRate WithLinkRate's bits/s
	// (0: none given).
	cc       bool
	linkRate float64
	// connect runs the admin Connect for req (filling in the protocol
	// version, client name and the session it replaces), checks the
	// reply's version and, on success, records the session: the
	// dialer then only reads the mode's fields of the answer.
	connect func(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error)
	// st counts what the transport sees: forged, stale or malformed
	// answers, speculation misses.
	st *stats
	// prev is the transport of the previous connection, nil or of
	// another mode: a dialer may take over its QPs (spec-s0 keeps its
	// QPs across reconnects) instead of building new ones.
	prev transport
	// log is the client's logger; now its clock (the engine's now),
	// which reads time.Since(start).
	log   *slog.Logger
	now   func() time.Duration
	start time.Time
}

// dialer builds a mode's transport: its QPs, the Connect that admits
// them, and attaching them to the grant.
type dialer func(ctx context.Context, env *transportEnv) (transport, error)

// transports registers each mode's dialer by the mode's name
// (spec.Mode*): adding a mode takes one file defining its dialer and one
// line here.
var transports = map[string]dialer{}

// arrivals bounds from above when an answer reached the host, on the
// client's clock (the engine's now): its receive stamp (verbs.WC.Arrived)
// plus the stamp's slack where the provider bounds that
// (verbs.DeviceAttr.ArrivedWithin), else now. It leaves out the time an
// answer waited for the engine (a descheduled or busy client): spec-s0
// tells a tag's late answers by it, and erpc's RTT samples end at it.
type arrivals struct {
	// within is the device's ArrivedWithin (0: its stamps bound arrivals
	// from below only), origin the verbs.Time of the client clock's zero.
	within time.Duration
	origin verbs.Time
}

func newArrivals(env *transportEnv) arrivals {
	return arrivals{within: env.dev.Attr().ArrivedWithin, origin: verbs.TimeOf(env.start)}
}

// by is the bound for an answer stamped arrived and read at now.
func (a arrivals) by(now time.Duration, arrived verbs.Time) time.Duration {
	if a.within == 0 || arrived == 0 {
		return now
	}
	return min(time.Duration(arrived-a.origin)+a.within, now)
}
