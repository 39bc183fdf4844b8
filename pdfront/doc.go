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
// In Exact mode (the default) it answers only when the count values came
// back consecutive, so that every value of the range was handed to this
// front end: the range is then seqd's alone whoever else uses the group
// (native clients, other seqd-pd instances), and above every value handed
// out before the request arrived, because seqd's guarantee covers its
// smallest value. A chain from one client is normally served by one
// batch of one worker, so it comes back consecutive; a batch that does
// not (it straddled a restart or failover, or interleaved with another
// client's in the worker) is dropped unanswered and taken again, a few
// times at most (ClientSource.ExactAttempts), then the request fails and
// PD's client retries it.
//
// With Exact off, any batch is answered. Every value in its range then
// either came back in this call or was claimed by seqd and answered to no
// one (a lost answer resent under a fresh tag) — PROVIDED this front end
// is the only client of its seqd group. Exact costs nothing when batches
// come back consecutive; turn it off only for a group seqd-pd has alone.
//
// A floor (the last value answered) is checked on every answer as a
// second line: a range at or below it is refused and counted, never sent.
//
// When a range crosses a millisecond boundary, the physical part is the
// first value's and the logical part exceeds 18 bits; PD's client
// subtracts count-1 from it, so every value it hands out composes
// (physical<<18 + logical) to the exact seqd value.
package pdfront
