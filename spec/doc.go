// Package spec is the Spec-S0 protocol written down: the layout of the
// 32-bit immediate both directions carry, the answer payloads, the value
// formats, the timing assumptions, and the pure logic both ends run: the
// client's tag Window and Speculator, the server's Confirms and Guard.
//
// Nothing here does I/O, starts goroutines or reads a clock: time is
// passed in, so every rule is tested deterministically. PROTOCOL.md states
// the invariants and the assumptions they rest on.
package spec
