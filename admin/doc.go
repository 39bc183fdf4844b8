// Package admin is seqd's gRPC control plane: it admits clients to the data
// path (Connect, Disconnect), reports status, and serves the standard gRPC
// health and reflection services next to the Admin service.
//
// Timestamps never travel over gRPC. The data path is RDMA verbs; this
// package only hands a client what it needs to use it (queue pair numbers,
// addresses, the Q_Key, a window) and takes it back.
//
// The admin server owns request validation and error mapping; the data plane
// implements Backend and sees only requests that are already valid. A backend
// reports failures with the sentinel errors of this package (ErrUnavailable,
// ErrNoCapacity, ...), wrapped with %w to say what failed, and the server
// turns them into gRPC status codes that mean the same thing.
//
// ServeMetrics runs the Prometheus /metrics listener, and Dial is the client
// side used by seqctl and the client library.
package admin
