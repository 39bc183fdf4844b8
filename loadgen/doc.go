// Package loadgen drives a running seqd with closed-loop load from the
// client library's asynchronous path, compares its data-path modes the way
// Kalia's thesis does (§4.7: throughput, latency against load, the
// summary of Table 4.1), measures the transport's own echo floor in the
// same run, and verifies every timestamp it received (package
// loadgen/verify).
//
// Load runs on the clients' engine goroutines: each outstanding request
// is a caller-owned client.Request whose Callback records the answer and
// submits the request again, so there is no goroutine, channel hop or
// allocation per request. Answers are recorded as (start, end, value)
// into per-client buffers sized before the run; they are verified after
// the run, off the measurement.
//
// With Config.Engine "wire" the load comes instead from package
// loadgen/wire, a generator lean enough that the server is the
// bottleneck, and every figure is given next to floors measured by the
// same generator on the same core in the same run (the provider's echo
// server and a raw UDP echo, in processes of their own: ServeFloor), with
// the server's CPU time per request and a Redis INCR reference.
package loadgen
