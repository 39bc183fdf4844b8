// Package rfp is seqd's RFP sequencer mode, after the remote fetching
// paradigm (Su et al., "RFP: When RPC is Faster than Server-Bypass with
// RDMA", EuroSys '17): every operation the server's NIC serves is
// in-bound, and the server CPU still runs the RPC.
//
//   - The client RDMA-WRITEs a request (spec.RFPSlotLen bytes: opcode and a
//     48-bit sequence number) into its slot in server memory, over an RC
//     connection.
//   - A core-pinned server worker polls the slots of its clients, claims
//     the values of a batch with one oracle claim, and writes each answer
//     into the slot's response record (spec.RFPRecordLen bytes) in its own
//     memory, stamped with the request's sequence number and the session's
//     answer tag.
//   - The client fetches the record with RDMA READ, up to R times (the
//     paper's hybrid threshold, spec.RFPDefaultReads), and then asks for a
//     server reply: it rewrites the slot with opcode RFPOpReply, and the
//     worker SENDs the record on the same connection (the paper's
//     server-reply mode, for answers the server is slow to produce).
//
// # Memory and isolation
//
// Each admitted client QP gets, on one worker, a server RC QP connected
// to it, a request block of window slots (remote write only) and a
// response block of window records (remote read only). A session's QPs
// and blocks live in a protection domain of the session's own, so no
// other client can write its request slots or read its records: the NIC
// refuses an R_Key of another PD. spec/PROTOCOL.md ("RFP") has the
// layouts.
//
// # Invariants and ordering
//
//  1. A slot is read as one 8-byte word and cleared (compare and swap, so
//     a newer request written meanwhile is kept). Per slot the worker
//     keeps the last seq read (spec.RFPSlotState): a seq is claimed for at
//     most once while answered, sent at most once, and older or repeated
//     requests are counted and ignored.
//  2. The record of a slot is invalidated (its head zeroed) when a newer
//     seq is read, BEFORE the claim: a record in memory always answers
//     the last request read from its slot, or nothing.
//  3. A value is claimed after the request that gets it was read; the
//     oracle persists its mark BEFORE it hands out a value below it.
//     Records are written only while the batch is younger than
//     spec.MaxResidence (counted from the start of the last sweep that
//     read the client's slots: a lower bound on the WRITE's arrival), and
//     the age is checked again right before the fallback SENDs; a late
//     batch's values are skipped, never handed out.
//  4. A record is written value, check, tail, then head, each with one
//     aligned 8-byte atomic store, so a READ that races the write is
//     refused by the client (spec.CheckRFPRecord), never taken.
//
// Stop drains the workers and moves every QP to ERR: no READ, WRITE or
// SEND of the mode happens after it returns, and the oracle's current
// value bounds every value the mode handed out.
package rfp
