// Package erpc is the eRPC data path (mode "erpc"): the sequencer served
// the way eRPC serves RPCs (Kalia et al., NSDI '19; Kalia's thesis,
// chapter 6), over UD SENDs with a small header in the payload, as
// eRPC's RoCE transport.
//
//   - Sessions (§6.3.3). Connect admits a session's client QPs; each is
//     an eRPC session endpoint of spec.ERPCSlots slots. A request names
//     its session, slot and the slot's request number
//     (spec.PutERPCHeader). The server finds the sender in its peer
//     table (internal/worker's, by the sender's identity on the wire) and
//     checks that the named session is the sender's.
//   - At-most-once (§6.4.3). Each slot keeps its request number and its
//     last answer (spec.ERPCServerSlot): a retransmitted request gets
//     the same values back, claimed once; a lower request number is
//     dropped (reordering counts as loss).
//   - Credits (§6.3.3.1). A session has C credits (the grant's Window;
//     spec.ERPCDefaultCredits). The server admits sessions only while the
//     credits of the sessions on a worker fit its posted receives, and
//     those of all sessions fit the device's receive buffer
//     (verbs.RecvBufferer); past it Connect fails with ErrNoCapacity.
//   - Server path (§4.7, §6.3.2). A worker polls a burst of requests,
//     claims the values of all new ones with one oracle claim, and
//     answers them with preallocated, unsignaled SENDs in one chain (one
//     doorbell), in its own thread: the handler runs in the dispatch
//     thread. Retransmissions are answered from the slot, claiming
//     nothing.
//   - Failure detection. A client pings a quiet session (spec.ERPCOpPing);
//     the worker answers pongs in the same chain.
//
// Congestion control (Timely, a Carousel wheel) is the client's, and is
// not built yet: spec.ERPCClientSession has the per-session rate field
// it will set, and a worker reads the clock once per burst.
package erpc
