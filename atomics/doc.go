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
// # Durability: the lease
//
// The persisted mark must bound every value handed out, but a NIC cannot
// check a mark. The server therefore holds a lease: a block of values
// claimed from the oracle (a claim succeeds only below a durable mark), so
// every value up to the lease's end is below the mark. A monitor reads the
// word every spec.LeaseInterval and claims the next block when less than
// half a block is left. If it cannot (persistence stalls) and the counter
// comes within FenceMargin of the lease's end, it FENCES: every QP moves to
// ERR, so no atomic can run past the lease; clients get an error and
// re-admit once the lease was renewed. This rests on one assumption,
// documented in spec/PROTOCOL.md: the NIC hands out fewer than FenceMargin
// values in one monitor period (FenceMargin = Block/4 = 16384 per 1 ms by
// default, 16 Mops — the thesis measured 2.24 Mops).
//
// After a crash the oracle restarts above the persisted mark, hence above
// every value the NIC handed out.
package atomics
