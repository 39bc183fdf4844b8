// Package client is seqd's public Go client: it connects to a seqd server
// over the admin plane, then gets timestamps over the data path of the
// server's mode (spec/PROTOCOL.md) on its own verbs device.
//
// One engine goroutine per Client drives one transport, the mode's data
// path (transport.go; specs0.go, herd.go, atomics.go, ...: one file per
// mode, registered in transports): it takes the requests callers
// submitted since its last turn and hands them to the transport, which
// posts them as one chain per QP (one doorbell), matches answers and
// retransmits; the engine checks every value (accept), fails requests at
// their deadlines, and reconnects after a server restart or mode switch.
// A Client is safe for concurrent use; GetTimestamp, GetTimestamps,
// GetRange and the asynchronous Submit all feed the same engine. Whoever
// drives the engine holds Client.drive: the engine goroutine, which lets
// go of it only while idle, or a lone GetTimestamp caller, which then
// runs the engine on its own goroutine (sends, polls with a short spin,
// blocks in the CQ's Wait) until its answer comes, with no hand-off
// between goroutines (driveOwn), and leaves any other work to the engine
// goroutine.
//
// GetRange reserves k consecutive values (a Range) in one round trip:
// one request, in mode fasst, for k values claimed together and
// answered with the first. A range has every guarantee a timestamp has,
// and in the hybrid format its k values share one millisecond (the
// server moves a range that would span a boundary to the next
// millisecond), so PD's (physical, logical) split of its last value
// gives each a logical part below 2^18. Modes whose request asks for one
// value (spec-s0, herd, atomics) and darpc and rfp refuse k > 1 with
// ErrUnsupported: their values could only be pieced together from
// several requests, and consecutiveness would not be guaranteed.
//
// In modes that serve ranges (fasst), concurrent calls are coalesced
// (coalesce.go, WithCoalescing): while a ranged request is in flight,
// callers queue, and the next request asks for as many values as wait,
// each caller getting its own value of the answer's range, in arrival
// order. A lone caller goes out at once, as without coalescing. Every
// value of a range is claimed by the server after the request arrived,
// hence after every caller in it began: above every value returned
// before any of them began. The callers of one range are concurrent, so
// real-time order allows any order among them (PROTOCOL.md, FaSST,
// "Callers coalesced into ranges").
//
// The package links no server code: the admin plane's client side is
// admin/adminclient (deps_test.go keeps it so).
//
// Dial needs only the server's admin address. Without WithDevice the
// client binds the soft provider (linked by this package) to the local
// address of its route to the server. A call waits until its context's
// deadline (WithTimeout's default, 10s, when it has none), across
// restarts and HA failovers; a timed-out call's error matches both
// ErrTimeout and context.DeadlineExceeded under errors.Is.
//
// A Client never returns a value that is not above every value it
// returned before the call began: such an answer is counted
// (Stats.Regressions) and the call fails.
//
// Inside, the data path is a pure state machine (engine.go: requests in
// flight and queued, deadlines, the one regression check) driven by a
// thin shell (loop.go: the engine goroutine, a lone caller's drive, the
// CQ waits and the admin plane's reconnects). testdata/engine holds its
// behaviour as datadriven traces: speculation, rollover prediction, tag
// quarantine, lost and late answers, a mode switch.
package client
