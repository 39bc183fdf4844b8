package atomics

import "github.com/seqd/seqd/verbs"

// The client side's view of an atomics admission, used by Conn (conn.go)
// and package client only. They move to package client with Conn (issue
// 13); this file goes with conn.go. The server speaks dataplane values
// (dataplane.Endpoint, Admission, Grant).

// Endpoint is one queue pair as peers see it.
type Endpoint struct {
	Addr verbs.Address
	QPN  verbs.QPN
}

// Grant is an admitted session: for each client QP the server QP it
// connects to, and the counter's address and R_Key.
type Grant struct {
	Session uint64
	Server  []Endpoint
	Addr    uint64
	RKey    uint32
	Epoch   uint64
	// PSNs are, per client QP, the first PSN it sends, which the server
	// QP expects: random, so a forged response must guess the window.
	PSNs []verbs.PSN
}
