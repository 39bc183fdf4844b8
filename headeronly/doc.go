// Package headeronly is the Spec-S0 server: header-only UD SENDs with
// speculation (spec/PROTOCOL.md), over any verbs provider.
//
// A Server runs N workers. Each owns one request UD QP with its own
// receive CQ, and Q response UD QPs that it rotates over per batch (the
// thesis's multi-queue guideline). A worker polls a batch of requests,
// re-posts their RECVs as one chain, validates each (its source must be a
// connected session's QP), claims ONCE per batch from the oracle, builds
// the answers (header-only confirmations, or the full value as an 8-byte
// payload) and posts them as one chain: one doorbell. Send completions are
// selectively signaled. The steady state allocates nothing.
//
// Ordering contract: a value is claimed after the request that gets it
// was received, and the oracle persists its mark BEFORE it hands out a
// value below it. On ErrBehind the worker keeps the batch and retries;
// it never claims ahead. A batch whose oldest request arrived (verbs.WC.
// Arrived) longer than spec.MaxResidence ago is dropped rather than
// answered late: before the claim and while the oracle is behind (reason
// "expired"), and immediately before the doorbell, after every wait
// (reason "late"). Requests of one client QP beyond its granted window in
// one batch are dropped (reason "window").
//
// Admission (Connect, Disconnect, Status) implements admin.Backend. A
// Connect whose windows would exceed a worker's MaxRecv receive buffers,
// or MaxClients sessions, is refused (admin.ErrNoCapacity, gRPC
// ResourceExhausted); nothing is overcommitted. Each worker keeps
// RecvSlack receives posted beyond its clients' windows, so that a client
// sending beyond its window, or a burst of packets that are not requests,
// does not use up the receives well-behaved clients need.
//
// Memory per client: a session, a peer per QP, an entry in its worker's
// copy-on-write peer table and a reference to a cached address handle,
// about 600-700 bytes of heap per one-QP client (e2e
// TestManyClientsMemory, 10,000 clients). Receive buffers do not grow
// with clients: MaxRecv of them per worker are registered at start. An
// address handle is closed a second after its last client QP left, so
// memory is bounded by the clients connected, not by every address ever
// seen. Clients that die without disconnecting are reclaimed by the admin
// plane's session lease (admin.Config.SessionLease, seqd -session-lease).
package headeronly
