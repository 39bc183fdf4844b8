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
// The front end takes count values from seqd's data path through the
// client library (one posted chain, one reservation at a time) and
// answers the range [max-count+1, max], max the largest value received.
//
// By default it answers any batch. Every value in the range then either
// came back in this call, or was claimed by seqd and answered to no one
// (a lost answer resent under a fresh tag), or was never handed out at
// all (the hybrid clock jumped over it) — PROVIDED this front end is the
// only client of its seqd group and takes one batch at a time (it does:
// reservations are serialized, and PD's client keeps one request in
// flight per stream). The range is then above every value handed out
// before the request arrived, across seqd restarts and failovers,
// because seqd's guarantee covers the smallest value of the batch.
//
// In Exact mode it answers only when the count values came back
// consecutive, so that every value of the range was handed to this front
// end: the range is then seqd's alone whoever else uses the group (native
// clients, other seqd-pd instances). A chain from one client served
// within one millisecond comes back consecutive; a batch that straddles
// a restart, a failover or a tick of the hybrid clock (the oracle jumps
// to the new millisecond), or interleaves with another client's, is
// dropped unanswered and taken again, a few times at most
// (ClientSource.ExactAttempts), then the request fails and PD's client
// retries it. Large counts (PD's client merging ~1000 callers) span
// milliseconds and then always fail: Exact suits shared groups with
// light PD load only.
//
// A floor (the last value answered) is checked on every answer as a
// second line: a range at or below it is refused and counted, never sent.
//
// When a range crosses a millisecond boundary, the physical part is the
// first value's and the logical part exceeds 18 bits; PD's client
// subtracts count-1 from it, so every value it hands out composes
// (physical<<18 + logical) to the exact seqd value.
package pdfront
