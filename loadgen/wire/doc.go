// Package wire is loadgen's lean wire-level load generator: it speaks
// Spec-S0 to seqd directly on one raw UDP socket, from pre-built RoCEv2
// packets, so that the server, not the generator, is the bottleneck.
//
// # Design
//
// One UDP socket bound to a port on INADDR_ANY emulates F client QPs
// (flows). Flow i has a source address of its own in 127.0.0.0/8 (the
// whole /8 is local on the loopback device, so no IP_FREEBIND is needed)
// and sends with a per-message IP_PKTINFO source; every flow shares the
// port, so answers to all of them arrive on the one socket, and the flows
// are distinct 4-tuples the kernel never merges. Each flow is admitted
// through Admin.Connect like a client QP (Admit), and answers are matched
// to their flow by the destination QPN in the BTH.
//
// Per request the generator writes three words of a pre-built header-only
// UD SEND_WITH_IMM: the BTH PSN, the immediate (tag and guess) and the
// ICRC, which rocev2.UDImmICRC computes from the fields with seven table
// lookups (the base for the flow is computed once). A flow's requests of
// one batch leave as one UDP GSO message (UDP_SEGMENT), segment k with
// its ICRC moved to IPv4 ID k as the kernel numbers them; all the flows'
// messages leave in one sendmmsg. Answers are received with UDP_GRO and
// recvmmsg, 64 datagrams a call. The clock is read once per loop
// iteration (a batch), never per request, and nothing is allocated per
// request (BenchmarkFlowRoundTrip, BenchmarkBuild with -benchmem).
//
// # Verification
//
// Every answer is checked, online and in O(1): its tag must be
// outstanding on its flow (else stale), it must come from the server's
// answer QPs with the session's answer Q_Key and a valid ICRC, and its
// value must be above the largest value the generator had received, over
// all flows, when the request was sent (real-time order; per-flow order
// is counted separately from the flow's own largest value). Values are
// kept in a preallocated buffer and checked for uniqueness across all
// flows after the run (package loadgen/verify's Online checker, whose
// Kinds name the violations). Any violation fails the run.
//
// # Loss
//
// A request unanswered for Config.Timeout (spec.MaxAnswerDelay, 8 ms:
// the server drops what it cannot answer within spec.MaxResidence) is
// given up and counted; its tag is quarantined for spec.DefaultQuarantine
// before reuse. The flow keeps its window full with new requests, so loss
// never hangs the generator, and a dropped batch idles its window slots
// for 8 ms rather than a client's 20 ms retransmission timeout.
package wire
