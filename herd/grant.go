package herd

import (
	"github.com/seqd/seqd/verbs"
)

// The client side's view of a HERD admission, used by Conn (conn.go) and
// package client only. They move to package client with Conn (issue 13);
// this file goes with conn.go. The server speaks dataplane values
// (dataplane.Endpoint, Admission, Grant).

// Endpoint is one queue pair as peers see it.
type Endpoint struct {
	Addr verbs.Address
	QPN  verbs.QPN
}

// ClientQP is what a client brings for one of its queue pairs: the UC QP
// it writes requests with and the UD QP answers go to.
type ClientQP struct {
	Write Endpoint // UC, in RESET or INIT until the grant connects it
	Recv  Endpoint // UD
}

// QPGrant is what the server grants one client QP.
type QPGrant struct {
	// Server is the server UC QP the client's Write QP connects to.
	Server Endpoint
	// Addr and RKey name slot 0 of the client QP's block; window position
	// p is at Addr + p*spec.SlotLen.
	Addr uint64
	RKey uint32
	// Worker serves the block.
	Worker int
}

// Grant is an admitted session.
type Grant struct {
	Session uint64
	QKey    uint32
	Window  int
	Epoch   uint64
	QPs     []QPGrant
	// AnswerFrom are the server's response QPs: the client accepts an
	// answer only from one of them.
	AnswerFrom verbs.Senders
}
