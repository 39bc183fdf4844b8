// Package verbs is seqd's RDMA verbs API, modelled on libibverbs.
//
// The API is the seam between seqd's protocol code (headeronly/, herd/,
// atomics/, client/) and a provider that moves packets:
//
//   - verbs/soft: a pure-Go userspace provider that speaks RoCEv2 over
//     kernel UDP sockets. It runs anywhere and is the default.
//   - verbs/ibv: a thin cgo provider over rdma-core's libibverbs for real
//     NICs (build tag "ibverbs").
//
// Code above verbs/ never knows which provider it runs on: it opens a
// Device through Open, and everything else goes through the interfaces in
// this package.
//
// The semantics follow libibverbs: protection domains own memory regions,
// address handles and queue pairs; queue pairs move through
// RESET→INIT→RTR→RTS with Modify; PostSend takes a chain of work requests
// (one call is one doorbell); completions are polled in batches into a
// slice the caller owns. A UD receive buffer starts with the 40-byte GRH
// area, as on hardware. Errors are values: no input makes a provider panic.
package verbs
