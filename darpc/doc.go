// Package darpc is seqd's DaRPC mode (Stuedi et al., "DaRPC: Data Center
// RPC", SoCC '14): RPCs over connected RC SEND/RECV, served by workers
// that each own a cluster of connections with one completion queue.
//
// # Connections and clusters (DaRPC §4.2)
//
// Every client QP is an RC QP connected to a server RC QP of its own. At
// admission each connection joins the cluster of the least loaded worker
// (DaRPC's load measure: how many polls in a row found completions; ties
// go to the worker with the fewest connections). A worker polls only its
// own CQ, which takes both the receive and the send completions of its
// connections, so a connection's requests, answers and buffers are
// touched by one core (completion queue clustering and locality). There
// is no work stealing: DaRPC drops per-connection order with it (§4.4),
// and a sequencer has no RPC long enough to need it.
//
// # Flow control (DaRPC §4.4)
//
// Each connection gets a ring of window receives, posted before the grant.
// The client keeps at most window calls in flight per QP; a call message
// carries at least one call, so the ring never runs dry for a client that
// keeps its budget (one that does not is held back by RC's RNR NAKs, on
// its own connection only). A worker re-posts a batch's receives per
// connection as one chain, before it answers.
//
// # Batched calls (DaRPC §6.1)
//
// A client puts the calls waiting for a QP into one message (call ID,
// count k; spec.PutDaRPCCall). A worker claims the values of every message
// of a polled batch with one oracle claim (persist before reply) and
// answers each message with one SEND carrying the first of its k
// consecutive values and the call ID (spec.PutDaRPCAnswer); the answers
// of a batch leave with one doorbell per connection touched, under one
// held doorbell where the device batches them (verbs.DoorbellBatcher).
//
// # Residence
//
// A batch older than spec.MaxResidence is never answered with values: its
// calls are refused (the answer says so and carries none), before the
// claim or, with the claimed values skipped, immediately before the
// doorbell. The client sends them again under a new call ID.
//
// PROTOCOL.md, "DaRPC (mode darpc)", has the wire layout and the
// real-time argument.
package darpc
