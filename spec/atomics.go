package spec

import "time"

// Atomics-mode constants shared by client and server.
const (
	// CounterLen is the size of the counter word clients FETCH_AND_ADD:
	// 8 bytes, 8-byte aligned, in the provider's atomic byte order.
	CounterLen = 8
	// FetchAddDelta is what every request adds: one value per request.
	FetchAddDelta = 1
	// LeaseInterval is how often the server reads the counter and renews
	// its lease on the oracle (PROTOCOL.md, "Atomics: durability").
	LeaseInterval = time.Millisecond
)
