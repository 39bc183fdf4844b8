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
// Admission gives every client QP, on one worker (at most MaxQPs per
// worker), a protection domain of its own holding a registered MR of
// window slots of spec.SlotLen bytes (its block, remote write only) and a
// server UC QP connected to the client's UC QP; the grant carries the
// block's address and R_Key. Window position p of the client QP is slot p
// of its block. Unlike HERD's one region per worker, no other QP can
// write the block: a WRITE that arrives on another client's QP names an
// R_Key of another PD, and one beyond the block is out of the MR's
// bounds; the NIC drops both (UC has no NAK; rx_drop_rkey on the soft
// provider). spec/PROTOCOL.md ("HERD") has the slot layout.
//
// # Invariants and ordering
//
//  1. A slot is read as one 8-byte word; the server zeroes it (compare
//     and swap, so a newer request written meanwhile is kept) BEFORE it
//     posts the reply, as the reference code does.
//  2. The server answers a (slot, seq) at most once: per slot it keeps the
//     last sequence number answered and accepts only one at most
//     spec.HERDMaxStep newer (24-bit serial arithmetic,
//     spec.HERDClassify). Duplicated and late WRITEs are counted
//     (duplicates_total), and so are WRITEs further ahead (ahead_total);
//     neither is answered, nor moves the slot's last seq.
//  3. A value is claimed after the request that gets it was read, and the
//     oracle persists its mark BEFORE it hands out a value below it. A
//     batch older than spec.MaxResidence (counted from a lower bound on
//     each WRITE's arrival: the start of the last sweep that read its
//     client's slots) is dropped, never answered late; the age is checked
//     again immediately before the doorbell (reason "late").
//  4. Every claimed value goes into exactly one answer.
//  5. The client bumps the slot's seq on every WRITE (retransmissions
//     included) and accepts only an answer echoing the current seq, so a
//     late answer to an earlier WRITE is never taken for a newer call. It
//     never writes a seq more than spec.HERDMaxStep after the last answer
//     it saw on the position (it reconnects instead), so the server never
//     drops its WRITEs as too far ahead.
//
// Stop drains the workers and moves every QP of the mode to ERR, so late
// requests get no answer; after Stop the oracle's current value bounds
// every value the mode handed out.
//
// # Trust
//
// A client can write only its own blocks: another admitted client, with
// the victim's address and R_Key, has its WRITEs dropped by the server's
// NIC, and cannot delay, drop or answer the victim's requests (it can
// still load the server, a capacity matter). A client that writes stray
// seqs into its own slots (a bug) hurts itself only, and not for long:
//
//   - a seq more than spec.HERDMaxStep past the slot's last answered one
//     (2^23, say) is dropped (ahead_total) and changes nothing;
//   - one within the step is answered (to the client's own QP, which
//     takes it as stale) and becomes the slot's last seq. The client sees
//     that answer, moves the position past it and rewrites its request
//     at once. Were that answer lost, its WRITEs would be dropped as
//     older until its seq passes the stray one, at most spec.HERDMaxStep
//     bumps; a position more than HERDMaxStep WRITEs past its last
//     answer reconnects to a fresh session.
//
// Only a sender that forges packets onto the victim's connection (its
// server QPN and the block's R_Key, which only the victim's grant
// carries) gets that far, and then as far as a stray WRITE does: a
// stream of forged WRITEs within the step keeps the slot's last seq
// ahead of the victim's and can starve it, and a forged WRITE of the
// victim's next seq whose answer reaches the victim after it wrote that
// seq is taken, as a forged answer would be (spec/PROTOCOL.md, "Answers
// only from the server": the data network must be closed to forgers).
// Nothing any client writes makes the server answer a (slot, seq) twice
// or hand out a value twice or out of order.
package herd
