// Package fasst is the FaSST-RPC data path (mode "fasst"): the sequencer
// served the way FaSST serves RPCs (Kalia et al., OSDI '16, §4; Kalia's
// thesis, §5.3), on UD SEND/RECV with a small payload header.
//
//   - A request is a UD SEND whose payload is an 8-byte RPC header: a
//     request ID and a count k (spec.PutFaSSTRequest). A client coalesces
//     the callers waiting on one of its QPs into one request for k values
//     (FaSST's message coalescing).
//   - Each worker owns one request QP whose receive queue all its
//     clients share (FaSST's per-thread RECV queue), sized by the
//     windows it admitted. Its receive descriptors are built once and
//     re-posted, one chain per batch (cheap RECV posting).
//   - A worker polls a batch of requests, claims the values of all of
//     them with one claim on the oracle (one atomic add), and answers
//     every request of the batch with one chain of SENDs (response
//     batching: one doorbell), rotated over its response QPs like
//     Spec-S0's. An answer carries the request's ID and count and the
//     first of its k consecutive values.
//   - Loss is the requester's business (FaSST's coarse timeouts): the
//     client sends a request again under a fresh ID and drops answers to
//     earlier ones. The server answers every request it receives in time
//     and never late (spec.MaxResidence).
//
// Answers go out from the response QPs only, with the session's own
// answer Q_Key, so that only the session's QPs take them (PROTOCOL.md,
// "Sessions, credentials and Q_Keys").
package fasst
