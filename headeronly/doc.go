// Package headeronly is the Spec-S0 server: header-only UD SENDs with
// speculation (spec/PROTOCOL.md), over any verbs provider.
//
// A Server runs N workers. Each owns a receive CQ, and Q response UD QPs
// that it rotates over per batch (the thesis's multi-queue guideline).
// Each admitted client QP gets a request UD QP of its own on its worker's
// receive CQ, with exactly its window of receives and the session's own
// request Q_Key, so that a client sending beyond its window uses up only
// its own receives, and no more than its window of a client QP's requests
// are ever at the server at once (Config.SharedRecv instead shares one
// request QP per worker among its clients). A worker polls a batch of
// requests, re-posts their RECVs to the QPs they came from (one chain per
// QP), validates each (its source must be the connected session's QP
// that the request QP belongs to), claims ONCE per batch from the oracle, builds
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
// (reason "late"). With SharedRecv, requests of one client QP beyond its
// granted window in one batch are dropped (reason "window"); by default
// its own request QP's receives bound them at all times.
//
// Server implements dataplane.Mode (package modes serves it through the
// admin protocol); its workers are internal/worker's. An Admit whose
// windows would exceed a worker's MaxRecv receive buffers, or MaxClients
// sessions, is refused (dataplane.ErrNoCapacity, gRPC ResourceExhausted);
// nothing is overcommitted. Admit creates the session's request QPs and
// posts their receives, then hands them to the workers; Release hands
// them back, and each worker destroys them
// between batches, when it holds no completion of them (recvq.go). With
// SharedRecv, each worker keeps RecvSlack receives posted on its shared
// QP beyond its clients' windows.
//
// Memory per client: a session, a peer per QP, an entry in its worker's
// copy-on-write peer table and a reference to a cached address handle,
// about 2.3 KB of heap per one-QP client (600-700 bytes with SharedRecv; e2e
// TestManyClientsMemory, 10,000 clients), including its request QP and
// window of receive buffers of 64 bytes (SharedRecv: MaxRecv of them
// per worker are registered at start). An
// address handle is closed a second after its last client QP left, so
// memory is bounded by the clients connected, not by every address ever
// seen. Clients that die without disconnecting are reclaimed by the admin
// plane's session lease (admin.Config.SessionLease, seqd -session-lease).
package headeronly
