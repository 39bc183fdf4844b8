// Package herd is seqd's HERD-RPC sequencer mode (Kalia's thesis §4.7):
// clients write requests into a request region in the server's memory
// with inlined, unsignaled UC RDMA WRITEs; core-pinned server workers poll
// the region, claim once per batch from the oracle and answer with UD
// SENDs carrying the 8-byte value, one posted chain per batch, rotated
// across Q response QPs. This package is the server (a dataplane.Mode:
// the workers, on internal/worker, and admission); the client side is client/herd.go.
//
// # Request region
//
// Each worker owns one registered MR of MaxQPs×MaxWindow slots of
// spec.SlotLen bytes. Admission gives every client QP a block of
// MaxWindow slots on one worker, a server UC QP connected to the client's
// UC QP, and the address and R_Key of the block; window position p of the
// client QP is slot p of its block. spec/PROTOCOL.md ("HERD") has the slot
// layout.
//
// # Invariants and ordering
//
//  1. A slot is read as one 8-byte word; the server zeroes it (compare
//     and swap, so a newer request written meanwhile is kept) BEFORE it
//     posts the reply, as the reference code does.
//  2. The server answers a (slot, seq) at most once: per slot it keeps the
//     last sequence number answered and accepts only newer ones (24-bit
//     serial arithmetic). Duplicated and late WRITEs are counted, never
//     answered.
//  3. A value is claimed after the request that gets it was read, and the
//     oracle persists its mark BEFORE it hands out a value below it. A
//     batch older than spec.MaxResidence (counted from a lower bound on
//     each WRITE's arrival: the start of the last sweep that read its
//     client's slots) is dropped, never answered late; the age is checked
//     again immediately before the doorbell (reason "late").
//  4. Every claimed value goes into exactly one answer.
//  5. The client bumps the slot's seq on every WRITE (retransmissions
//     included) and accepts only an answer echoing the current seq, so a
//     late answer to an earlier WRITE is never taken for a newer call.
//
// Stop drains the workers and moves every QP of the mode to ERR, so late
// requests get no answer; after Stop the oracle's current value bounds
// every value the mode handed out.
//
// Trust: any admitted client can write any slot of a worker's region (one
// R_Key per region, as in HERD). A misbehaving client can disturb others'
// requests (they time out and are retried) but cannot make the server
// answer a value twice or out of order.
package herd
