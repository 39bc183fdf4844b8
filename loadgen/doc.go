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
package loadgen
