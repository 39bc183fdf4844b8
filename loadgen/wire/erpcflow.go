package wire

import (
	"fmt"

	"github.com/seqd/seqd/spec"
)

// erpcSlot is one slot of an emulated eRPC session endpoint.
type erpcSlot struct {
	reqNum    uint64 // the request number last sent from the slot
	busy      bool
	sentAt    int64
	floor     uint64
	flowFloor uint64
	// the slot's last answer: a copy of it must carry the same value
	// (at-most-once)
	lastNum, lastFirst uint64
	lastOK             bool
}

// ERPCMatch is what an answer is to an ERPCFlow.
type ERPCMatch int

const (
	// ERPCAccepted: the answer to the slot's request in flight.
	ERPCAccepted ERPCMatch = iota
	// ERPCDuplicate: a copy of the slot's last answer, same value.
	ERPCDuplicate
	// ERPCReanswered: a copy of the slot's last answer with another
	// value: the server broke at-most-once.
	ERPCReanswered
	// ERPCUnmatched: an earlier request number, a given-up request, or
	// a slot outside the window.
	ERPCUnmatched
)

// ERPCFlow is the protocol state of one emulated eRPC session endpoint
// (a client QP; PROTOCOL.md, "eRPC"): up to its credits of slots in
// flight, one value per request, request numbers per slot that only
// grow. Like Flow it is pure. The generator does not retransmit: a
// request unanswered after the timeout is given up, and the slot's next
// request carries a higher request number, which the server runs anew.
type ERPCFlow struct {
	Session uint64
	slots   [spec.ERPCSlots]erpcSlot
	window  int
	free    []uint8 // free slots, a stack
	max     uint64
}

// NewERPCFlow returns a session endpoint of session with window slots
// in use (1..spec.ERPCSlots: its credits).
func NewERPCFlow(session uint64, window int) (*ERPCFlow, error) {
	if window < 1 || window > spec.ERPCSlots {
		return nil, fmt.Errorf("wire: erpc window %d (1..%d)", window, spec.ERPCSlots)
	}
	f := &ERPCFlow{Session: session, window: window, free: make([]uint8, window, spec.ERPCSlots)}
	for i := range f.free {
		f.free[i] = uint8(window - 1 - i)
	}
	return f, nil
}

// Window is the number of slots in use.
func (f *ERPCFlow) Window() int { return f.window }

// Outstanding is the number of requests in flight.
func (f *ERPCFlow) Outstanding() int { return f.window - len(f.free) }

// Max is the largest value the flow received.
func (f *ERPCFlow) Max() uint64 { return f.max }

// Send takes a free slot for a request at now and gives it the slot's
// next request number, or reports false when every slot is busy.
func (f *ERPCFlow) Send(now int64, floor uint64) (int, uint64, bool) {
	n := len(f.free)
	if n == 0 {
		return 0, 0, false
	}
	i := int(f.free[n-1])
	f.free = f.free[:n-1]
	s := &f.slots[i]
	s.reqNum++
	s.busy, s.sentAt, s.floor, s.flowFloor = true, now, floor, f.max
	return i, s.reqNum, true
}

// Answer matches an answer for (slot, rn) carrying first: for the
// request in flight it frees the slot and returns the request.
func (f *ERPCFlow) Answer(slot int, rn, first uint64) (Sent, ERPCMatch) {
	if slot < 0 || slot >= f.window {
		return Sent{}, ERPCUnmatched
	}
	s := &f.slots[slot]
	switch {
	case s.busy && s.reqNum == rn:
		s.busy = false
		s.lastNum, s.lastFirst, s.lastOK = rn, first, true
		f.free = append(f.free, uint8(slot))
		return Sent{At: s.sentAt, High: NoHigh, Floor: s.floor, FlowFloor: s.flowFloor}, ERPCAccepted
	case s.lastOK && rn == s.lastNum:
		if first != s.lastFirst {
			return Sent{}, ERPCReanswered
		}
		return Sent{}, ERPCDuplicate
	}
	return Sent{}, ERPCUnmatched
}

// Accept records v, an answer's value the checks let through.
func (f *ERPCFlow) Accept(v uint64) { f.max = max(f.max, v) }

// Expire gives up the requests unanswered since before now-timeout and
// returns how many. A late answer to one is unmatched: the slot's next
// request carries a higher request number.
func (f *ERPCFlow) Expire(now, timeout int64) int {
	n := 0
	for i := range f.window {
		if s := &f.slots[i]; s.busy && now-s.sentAt >= timeout {
			s.busy = false
			f.free = append(f.free, uint8(i))
			n++
		}
	}
	return n
}
