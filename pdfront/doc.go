// Package pdfront is a PD-compatible TSO front end for seqd: it serves the
// part of PD's gRPC API (pdpb.PD) that PD's Go client
// (github.com/tikv/pd/client) uses to get timestamps — GetMembers for
// leader discovery and the bidirectional Tso stream — and the standard
// gRPC health service the client polls on its leader. Every other PD
// method answers Unimplemented.
//
// Only cmd/seqd-pd imports this package, so PD's dependencies (kvproto,
// pingcap's errors and log) stay out of seqd and of its
// client library: `go list -deps ./cmd/seqd ./client` names none of them
// (TestDepsStayOut).
//
// # Values
//
// A TsoRequest asks for count timestamps; PD answers with the LAST of
// count consecutive values, split into physical milliseconds and an
// 18-bit logical part, and the client derives the other count-1 itself.
// seqd's hybrid format is PD's layout (46 bits of milliseconds above 18
// logical bits), so a seqd value v is the PD timestamp (v>>18, v&(1<<18-1))
// and PD's ComposeTS gives v back.
//
// The front end serves each request from one seqd range
// (client.GetRange, in mode fasst): count consecutive values reserved in
// one round trip, answered to this front end alone. The range has every
// guarantee of a seqd timestamp: unique across all of seqd's clients
// (native clients and other seqd-pd instances may share the group), above
// every value handed out before the request arrived, across seqd
// restarts and failovers. Requests on different streams are served
// concurrently. In a mode without ranges only counts of 1 are served;
// the others fail with Unavailable and PD's client retries them.
//
// In the hybrid format a seqd range never spans a millisecond boundary
// (the server moves one that would to the next millisecond), so the
// last value's split is PD's own: physical milliseconds and a logical
// part below 2^18 from which PD's client subtracts count-1 without going
// below 0 — every value it hands out has the range's physical part and a
// logical part in [0, 2^18), as from PD.
//
// A floor (the largest value answered before the request arrived) is
// checked on every answer as a second line: a range at or below it is
// refused and counted, never sent.
package pdfront
