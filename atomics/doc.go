// Package atomics is seqd's RDMA fetch-and-add baseline (Kalia's thesis
// §4.7.2): the counter is an 8-byte word in a registered MR on the server,
// and clients take values with ATOMIC_FETCH_AND_ADD over RC queue pairs
// (several per client, requests posted as chains: the postlist). The server
// CPU does nothing per request; the NIC (or the userspace provider's RC
// responder) runs each atomic exactly once, retransmissions included.
//
// # Ownership of the counter
//
// NIC atomics are not atomic with respect to CPU atomics on the same word,
// so the counter has ONE owner at a time. While this mode runs, the NIC
// owns the word and the CPU only reads it (the lease monitor). The oracle
// owns the value in every other mode. Start takes the value over from the
// oracle (a claim: the first value the NIC hands out is above every value
// handed out before); Stop moves every QP to ERR — after which no atomic
// executes — reads the word and returns the highest value the NIC could
// have handed out, which the next mode floors the oracle above
// (oracle.Floor).
//
// # Values
//
// The NIC cannot read a clock: it hands out plain increments. In the
// hybrid format the mode continues from the value it started at (at or
// above now<<18 at the time) and does not track physical time while it is
// active; values stay unique and increasing. The next CPU mode jumps
// forward to now<<18 again (the oracle's claims never go below the clock).
//
// # What a client may do: the atomic policy
//
// A client holds an R_Key with remote atomic access to the shared word,
// and only a FETCH_AND_ADD of one keeps the contract: a compare-and-swap
// or an add that wraps moves the counter backward (the next client gets
// values already handed out), a large add moves it past the lease (values
// above the persisted mark, served again after a crash). Where the
// provider can police the region (verbs.AtomicPolicer, the userspace
// provider's RC responder), the counter is registered with the policy
// "fetch-and-add of one, returning at most the lease's end": the
// responder refuses anything else with a remote access error (the
// client's QP goes to ERR) and holds a fetch-and-add beyond the lease
// (receiver not ready) until the monitor renews it. A NIC cannot refuse
// them, so on such a provider only clients whose verified identity is in
// Config.Trusted (-atomics-trusted) are admitted.
//
// # Durability: the lease
//
// The persisted mark must bound every value handed out, but a NIC cannot
// check a mark. The server therefore holds a lease: a block of values
// claimed from the oracle (a claim succeeds only below a durable mark), so
// every value up to the lease's end is below the mark. A monitor reads the
// word every spec.LeaseInterval and claims the next block when less than
// half a block is left (and raises the policy's limit to its end). If it
// cannot (persistence stalls) and the counter comes within FenceMargin of
// the lease's end, it FENCES: every QP moves to ERR, so no atomic can run
// past the lease; clients get an error and re-admit once the lease was
// renewed. Without the policy this rests on one assumption, documented in
// spec/PROTOCOL.md: the NIC hands out fewer than FenceMargin values in one
// monitor period (FenceMargin = Block/4 = 16384 per 1 ms by default, 16
// Mops — the thesis measured 2.24 Mops).
//
// A reading below the previous one, or beyond the lease, is a breach (an
// atomic the provider could not refuse): the monitor fences at once,
// floors the oracle above every value the word reached, and restarts the
// word in a new lease above them before admitting again. Stop reports at
// least that value, whatever the word holds.
//
// After a crash the oracle restarts above the persisted mark, hence above
// every value the NIC handed out.
package atomics
