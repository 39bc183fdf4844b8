package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// eRPC mode (PROTOCOL.md, "eRPC"): sessions of ERPCSlots slots over UD
// SENDs with a small header in the payload, as eRPC's RoCE transport
// (Kalia's thesis, chapter 6). A request names its destination session,
// its slot and the slot's request number; the server keeps, per slot,
// the request number and the last answer, so that a retransmitted
// request (same session, slot and request number) gets the same values
// back and no request number is served twice (at-most-once).
//
// Request, ERPCRequestLen bytes:
//
//	0     version (ERPCVersion)
//	1     opcode (ERPCOpRequest or ERPCOpPing)
//	2     slot (< ERPCSlots; 0 in a ping)
//	3     reserved, 0
//	4:6   count k (1..ERPCMaxRange; 0 in a ping), big endian
//	6:8   reserved, 0
//	8:16  session ID (the Connect grant's), big endian
//	16:24 request number (> 0), big endian; a ping's sequence number
//
// Answer, ERPCAnswerLen bytes: the same header with opcode ERPCOpAnswer
// (ERPCOpPong to a ping), echoing slot, count, session and request
// number, then the first of the k consecutive values (0 in a pong).
const (
	ERPCVersion = 1
	// The opcodes.
	ERPCOpRequest = 1
	ERPCOpAnswer  = 2
	ERPCOpPing    = 3
	ERPCOpPong    = 4

	ERPCHeaderLen  = 24
	ERPCRequestLen = ERPCHeaderLen
	ERPCAnswerLen  = ERPCHeaderLen + 8

	// ERPCSlots is the number of slots of a session: its requests in
	// flight (eRPC's kSessionReqWindow, 8).
	ERPCSlots = 8
	// ERPCDefaultCredits is a session's credits C when the client asks
	// for none: the packets it may have unanswered (eRPC's
	// kSessionCredits, 8). The server admits sessions only while their
	// credits fit its receive capacity.
	ERPCDefaultCredits = 8
	// ERPCMaxCredits is the most credits one session is granted.
	ERPCMaxCredits = 256
	// ERPCMaxRange is the most values one request asks for.
	ERPCMaxRange = FaSSTMaxRange
	// ERPCDefaultRTO is the client's retransmission timeout (eRPC's
	// 5 ms, thesis §6.4.2.3).
	ERPCDefaultRTO = 5 * time.Millisecond
	// ERPCHeartbeat is how long a session stays quiet before the
	// client pings it.
	ERPCHeartbeat = 100 * time.Millisecond
	// ERPCFailAfter is how long a session waits for any packet of the
	// server (an answer or a pong) while it waits for one, before the
	// client takes the server for dead and reconnects: pending calls
	// move to the next connection within 500 ms of the server's death.
	ERPCFailAfter = 400 * time.Millisecond
)

var _ = [1]struct{}{}[boolToInt(ERPCMaxRange <= HybridMillisecond && ERPCSlots <= 255)-1]

// Errors of the eRPC decoder (besides ErrBadLength).
var (
	ErrERPCVersion = errors.New("spec: bad erpc version")
	ErrERPCOpcode  = errors.New("spec: bad erpc opcode")
	ErrERPCCount   = errors.New("spec: erpc count out of range")
	ErrERPCSlot    = errors.New("spec: erpc slot out of range")
	ErrERPCReqNum  = errors.New("spec: erpc request number 0")
)

// ERPCHeader is a decoded eRPC header.
type ERPCHeader struct {
	Op      uint8
	Slot    int
	Count   int
	Session uint64
	ReqNum  uint64
}

// IsPing reports whether h is a ping or a pong (no slot, no values).
func (h ERPCHeader) IsPing() bool { return h.Op == ERPCOpPing || h.Op == ERPCOpPong }

func (h ERPCHeader) check() error {
	switch h.Op {
	case ERPCOpRequest, ERPCOpAnswer:
		if h.Count < 1 || h.Count > ERPCMaxRange {
			return fmt.Errorf("%w: %d", ErrERPCCount, h.Count)
		}
		if h.Slot < 0 || h.Slot >= ERPCSlots {
			return fmt.Errorf("%w: %d", ErrERPCSlot, h.Slot)
		}
		if h.ReqNum == 0 {
			return ErrERPCReqNum
		}
	case ERPCOpPing, ERPCOpPong:
		if h.Count != 0 || h.Slot != 0 {
			return fmt.Errorf("%w: ping with slot %d count %d", ErrERPCCount, h.Slot, h.Count)
		}
	default:
		return fmt.Errorf("%w: %d", ErrERPCOpcode, h.Op)
	}
	return nil
}

// PutERPCHeader encodes h into b, which must hold ERPCHeaderLen bytes.
func PutERPCHeader(b []byte, h ERPCHeader) error {
	if len(b) < ERPCHeaderLen {
		return fmt.Errorf("%w: erpc header buffer of %d bytes, want %d", ErrBadLength, len(b), ERPCHeaderLen)
	}
	if err := h.check(); err != nil {
		return err
	}
	b[0], b[1], b[2], b[3] = ERPCVersion, h.Op, byte(h.Slot), 0
	binary.BigEndian.PutUint16(b[4:], uint16(h.Count))
	b[6], b[7] = 0, 0
	binary.BigEndian.PutUint64(b[8:], h.Session)
	binary.BigEndian.PutUint64(b[16:], h.ReqNum)
	return nil
}

// PutERPCAnswer encodes an answer (h.Op ERPCOpAnswer or ERPCOpPong)
// with first value first into b, which must hold ERPCAnswerLen bytes.
func PutERPCAnswer(b []byte, h ERPCHeader, first uint64) error {
	if len(b) < ERPCAnswerLen {
		return fmt.Errorf("%w: erpc answer buffer of %d bytes, want %d", ErrBadLength, len(b), ERPCAnswerLen)
	}
	if err := PutERPCHeader(b, h); err != nil {
		return err
	}
	binary.BigEndian.PutUint64(b[ERPCHeaderLen:], first)
	return nil
}

// DecodeERPC decodes a request or answer payload (GRH area removed;
// untrusted): ERPCRequestLen bytes for a request or ping,
// ERPCAnswerLen bytes (with the first value) for an answer or pong.
func DecodeERPC(b []byte) (h ERPCHeader, first uint64, err error) {
	if len(b) < ERPCHeaderLen {
		return h, 0, fmt.Errorf("%w: erpc packet of %d bytes", ErrBadLength, len(b))
	}
	if b[0] != ERPCVersion {
		return h, 0, fmt.Errorf("%w: %d", ErrERPCVersion, b[0])
	}
	h = ERPCHeader{Op: b[1], Slot: int(b[2]), Count: int(binary.BigEndian.Uint16(b[4:])),
		Session: binary.BigEndian.Uint64(b[8:]), ReqNum: binary.BigEndian.Uint64(b[16:])}
	want := ERPCRequestLen
	if h.Op == ERPCOpAnswer || h.Op == ERPCOpPong {
		want = ERPCAnswerLen
	}
	if len(b) != want {
		return h, 0, fmt.Errorf("%w: erpc opcode %d carries %d bytes, want %d", ErrBadLength, h.Op, len(b), want)
	}
	if b[3] != 0 || b[6] != 0 || b[7] != 0 {
		return h, 0, fmt.Errorf("%w: reserved bytes set", ErrERPCOpcode)
	}
	if err := h.check(); err != nil {
		return h, 0, err
	}
	if want == ERPCAnswerLen {
		first = binary.BigEndian.Uint64(b[ERPCHeaderLen:])
	}
	return h, first, nil
}

// ERPCVerdict is what the server does with a request (ERPCServerSlot).
type ERPCVerdict int

const (
	// ERPCRun: a new request number: claim its values and answer.
	ERPCRun ERPCVerdict = iota
	// ERPCResend: the request number last answered: send the same answer
	// again, claiming nothing.
	ERPCResend
	// ERPCStale: a request number below the slot's: an old or reordered
	// packet, dropped (reordering counts as loss).
	ERPCStale
	// ERPCBusy: the request number being served in this batch: the copy
	// is dropped; a later retransmission gets the answer (ERPCResend).
	ERPCBusy
	// ERPCMismatch: the request number last answered, but for another
	// count: dropped (a client never does it).
	ERPCMismatch
)

var erpcVerdicts = [...]string{"run", "resend", "stale", "busy", "mismatch"}

func (v ERPCVerdict) String() string {
	if int(v) < len(erpcVerdicts) {
		return erpcVerdicts[v]
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// ERPCServerSlot is one slot of a server session: the request number it
// serves and its last answer (Kalia's thesis, §6.3.3: a slot keeps its
// request's metadata and a preallocated response). It is pure: the
// worker owning the session calls it for each request, then Done once
// the values of an ERPCRun request are claimed and its answer posted, or
// Abort when they are not (the request then never ran, and its
// retransmission runs it).
//
// The one rule it keeps: for a request number there is at most one
// claim whose answer was posted; every later copy of the request gets
// those values again (at-most-once).
type ERPCServerSlot struct {
	reqNum  uint64
	first   uint64
	count   int
	done    bool // first/count answer reqNum
	running bool // reqNum is being served in the current batch
}

// Receive classifies a request for count values under request number rn.
func (s *ERPCServerSlot) Receive(rn uint64, count int) ERPCVerdict {
	switch {
	case rn < s.reqNum:
		return ERPCStale
	case rn == s.reqNum && s.done:
		if count != s.count {
			return ERPCMismatch
		}
		return ERPCResend
	case rn == s.reqNum && s.running:
		return ERPCBusy
	}
	// A new request number, or the current one whose claim never went
	// out (Abort): it runs.
	s.reqNum, s.count, s.done, s.running = rn, count, false, true
	return ERPCRun
}

// Answer is the answer last posted for the slot's request number.
func (s *ERPCServerSlot) Answer() (rn, first uint64, count int, ok bool) {
	return s.reqNum, s.first, s.count, s.done
}

// Done records that the running request's answer, first, was posted.
func (s *ERPCServerSlot) Done(first uint64) {
	if s.running {
		s.first, s.done, s.running = first, true, false
	}
}

// Abort records that the running request got no values (the claim
// failed, or they were skipped past the residence bound).
func (s *ERPCServerSlot) Abort() { s.running = false }

// Undo takes back Done of this batch: the answer was never posted (the
// batch aged past the residence bound before its doorbell), so its
// values were skipped, and a retransmission runs the request anew.
func (s *ERPCServerSlot) Undo() { s.done = false }

// ERPCClientSession is the client's state of one session (pure: time
// is passed in; the transport does the I/O): ERPCSlots slots, each with
// its request number, C credits, the retransmission timer with
// go-back-N, and failure detection by heartbeats.
//
// Credits: a request takes one and its answer gives it back; a session
// sends no request without one. Go-back-N: when the oldest request in
// flight is unanswered for the RTO, every request in flight is sent
// again, in the order first sent, under the same request numbers (their
// credits are reclaimed and spent again). Failure: a session waiting for
// the server (a request in flight or a ping) that hears nothing from it
// for FailAfter has Failed. A request held by the sender's rate limiter
// (Hold) is not on the wire: it has no timer, and is not waited for,
// until Sent.
type ERPCClientSession struct {
	Credits int // C
	RTO     time.Duration
	FailAfter,
	Heartbeat time.Duration
	// Rate is the session's sending rate in bytes per second, 0 for
	// unlimited: the client transport copies its Timely's rate here
	// (Timely); the session itself does not read it.
	Rate float64

	used    int // credits in use
	slots   [ERPCSlots]erpcClientSlot
	order   uint64        // send order of the next request
	heard   time.Duration // the last packet from the server
	waiting time.Duration // when the session last began waiting with nothing in flight
	pingNum uint64        // the ping in flight (0: none)
	pingAt  time.Duration
}

type erpcClientSlot struct {
	busy   bool
	held   bool // taken, not on the wire yet (Hold, Sent)
	reqNum uint64
	count  int
	order  uint64        // when first sent, in send order
	sentAt time.Duration // last transmission
	// last answer of the slot: a duplicate of it must repeat its value
	lastNum, lastFirst uint64
	lastOK             bool
}

// NewERPCClientSession returns a session with c credits (at most
// ERPCSlots requests in flight, and at most c), the RTO, heartbeat and
// failure timeout (zero: the defaults), heard from at now.
func NewERPCClientSession(c int, rto, heartbeat, failAfter time.Duration, now time.Duration) *ERPCClientSession {
	if c < 1 {
		c = ERPCDefaultCredits
	}
	if rto <= 0 {
		rto = ERPCDefaultRTO
	}
	if heartbeat <= 0 {
		heartbeat = ERPCHeartbeat
	}
	if failAfter <= 0 {
		failAfter = ERPCFailAfter
	}
	return &ERPCClientSession{Credits: c, RTO: rto, Heartbeat: heartbeat, FailAfter: failAfter, heard: now, waiting: now}
}

// Heard is when the session last heard from the server.
func (s *ERPCClientSession) Heard() time.Duration { return s.heard }

// InFlight is the requests in flight: taken and not answered, held
// ones included (each holds its credit).
func (s *ERPCClientSession) InFlight() int {
	n := 0
	for i := range s.slots {
		if s.slots[i].busy {
			n++
		}
	}
	return n
}

// onWire is the requests in flight that have been sent: not held.
func (s *ERPCClientSession) onWire() int {
	n := 0
	for i := range s.slots {
		if sl := &s.slots[i]; sl.busy && !sl.held {
			n++
		}
	}
	return n
}

// Hold marks slot's request, just taken, as not sent yet: the sender's
// rate limiter holds it. It has no retransmission timer, go-back-N
// leaves it alone, and the session does not wait for it, until Sent.
func (s *ERPCClientSession) Hold(slot int) {
	if sl := &s.slots[slot]; sl.busy {
		sl.held = true
	}
}

// Sent marks slot's held request as sent at now: its timer starts.
func (s *ERPCClientSession) Sent(slot int, now time.Duration) {
	sl := &s.slots[slot]
	if !sl.busy || !sl.held {
		return
	}
	if s.onWire() == 0 && s.pingNum == 0 {
		s.waiting = now
	}
	sl.held, sl.sentAt = false, now
}

// Room is how many more requests the session may send now: free slots
// and credits.
func (s *ERPCClientSession) Room() int {
	return max(min(ERPCSlots-s.InFlight(), s.Credits-s.used), 0)
}

// waitingNow notes that the session begins to wait at now when nothing
// was on the wire.
func (s *ERPCClientSession) waitingNow(now time.Duration) {
	if s.onWire() > 0 {
		return
	}
	// A ping left unanswered while nobody ran the timers (an idle
	// client) is forgotten: the wait starts now.
	if s.pingNum != 0 && now-s.pingAt >= s.Heartbeat {
		s.pingNum = 0
	}
	if s.pingNum == 0 {
		s.waiting = now
	}
}

// Take starts a request for count values at now: a free slot, a credit
// and the slot's next request number; false when there is no room.
func (s *ERPCClientSession) Take(now time.Duration, count int) (slot int, rn uint64, ok bool) {
	if s.Room() == 0 || count < 1 || count > ERPCMaxRange {
		return 0, 0, false
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.busy {
			continue
		}
		s.waitingNow(now)
		// Request numbers of a slot only grow: the server drops lower
		// ones (stale) and resends the answer of an equal one.
		sl.reqNum = max(sl.reqNum, sl.lastNum) + 1
		sl.busy, sl.held, sl.count, sl.order, sl.sentAt = true, false, count, s.order, now
		s.order++
		s.used++
		return i, sl.reqNum, true
	}
	return 0, 0, false
}

// ERPCMatch is what an answer is to the session (Answer).
type ERPCMatch int

const (
	// ERPCAccepted: the answer to a slot's request in flight.
	ERPCAccepted ERPCMatch = iota
	// ERPCDuplicate: a copy of the slot's last answer, with its value.
	ERPCDuplicate
	// ERPCReanswered: a copy of the slot's last answer with another
	// value: the server broke at-most-once.
	ERPCReanswered
	// ERPCUnmatched: stale (an earlier request number) or unknown.
	ERPCUnmatched
)

// Answer takes an answer for slot, request number rn, count values from
// first, at now. Any answer of the session's proves the server alive.
func (s *ERPCClientSession) Answer(now time.Duration, slot int, rn uint64, count int, first uint64) ERPCMatch {
	if slot < 0 || slot >= ERPCSlots {
		return ERPCUnmatched
	}
	sl := &s.slots[slot]
	switch {
	case sl.busy && sl.reqNum == rn && sl.count == count:
		s.heard = now
		sl.busy, sl.lastNum, sl.lastFirst, sl.lastOK = false, rn, first, true
		s.used = max(s.used-1, 0)
		return ERPCAccepted
	case sl.lastOK && rn == sl.lastNum:
		s.heard = now
		if first != sl.lastFirst {
			return ERPCReanswered
		}
		return ERPCDuplicate
	}
	return ERPCUnmatched
}

// Cancel gives slot up (its caller did): its credit comes back and an
// answer that still comes for it is unmatched.
func (s *ERPCClientSession) Cancel(slot int) {
	if slot < 0 || slot >= ERPCSlots || !s.slots[slot].busy {
		return
	}
	sl := &s.slots[slot]
	sl.busy = false
	sl.lastNum, sl.lastFirst, sl.lastOK = sl.reqNum, 0, false // its number is spent: an answer to it is stale
	s.used = max(s.used-1, 0)
}

// Request is slot's request in flight: its request number and count.
func (s *ERPCClientSession) Request(slot int) (rn uint64, count int, ok bool) {
	sl := &s.slots[slot]
	return sl.reqNum, sl.count, sl.busy
}

// NextRTO is when the oldest request in flight times out.
func (s *ERPCClientSession) NextRTO() (time.Duration, bool) {
	at, ok := time.Duration(0), false
	for i := range s.slots {
		if sl := &s.slots[i]; sl.busy && !sl.held && (!ok || sl.sentAt+s.RTO < at) {
			at, ok = sl.sentAt+s.RTO, true
		}
	}
	return at, ok
}

// GoBackN, when a request in flight has timed out at now, rolls the
// session back to it: every request in flight is to be sent again, in
// the order first sent. It appends their slots to out and returns it;
// nothing is appended when none timed out. Credits: each resend spends
// the credit its rolled-back transmission gave back.
func (s *ERPCClientSession) GoBackN(now time.Duration, out []int) []int {
	if at, ok := s.NextRTO(); !ok || now < at {
		return out
	}
	from := len(out)
	for i := range s.slots {
		if sl := &s.slots[i]; sl.busy && !sl.held {
			out = append(out, i)
		}
	}
	// Insertion sort by send order (at most ERPCSlots entries; no
	// allocation).
	for i := from + 1; i < len(out); i++ {
		for j := i; j > from && s.slots[out[j]].order < s.slots[out[j-1]].order; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	for _, sl := range out[from:] {
		s.slots[sl].sentAt = now
	}
	return out
}

// Ping reports whether the session should send a heartbeat at now (it
// was quiet for Heartbeat, with nothing on the wire: held requests wait
// for the rate limiter, not for the server) and, if so, records
// the ping and returns its number.
func (s *ERPCClientSession) Ping(now time.Duration) (uint64, bool) {
	if s.onWire() > 0 || s.pingNum != 0 && now-s.pingAt < s.Heartbeat || now-s.heard < s.Heartbeat {
		return 0, false
	}
	if s.pingNum == 0 {
		s.waiting = now
	}
	s.order++
	s.pingNum, s.pingAt = s.order, now
	return s.pingNum, true
}

// Pong takes a pong for ping n at now.
func (s *ERPCClientSession) Pong(now time.Duration, n uint64) bool {
	if n == 0 || n != s.pingNum {
		return false
	}
	s.heard, s.pingNum = now, 0
	return true
}

// Failed reports whether the session waited for the server (a request
// or a ping in flight) and heard nothing from it for FailAfter at now.
func (s *ERPCClientSession) Failed(now time.Duration) bool {
	if s.onWire() == 0 && s.pingNum == 0 {
		return false
	}
	return now-max(s.heard, s.waiting) >= s.FailAfter
}

// NextEvent is when the session next has work without a packet coming:
// a retransmission, the failure timeout, or a heartbeat.
func (s *ERPCClientSession) NextEvent() time.Duration {
	at, ok := s.NextRTO()
	if s.onWire() > 0 || s.pingNum != 0 {
		f := max(s.heard, s.waiting) + s.FailAfter
		if !ok || f < at {
			at, ok = f, true
		}
	}
	if s.onWire() > 0 {
		return at // no heartbeat while requests are in flight
	}
	hb := s.heard + s.Heartbeat
	if s.pingNum != 0 {
		hb = s.pingAt + s.Heartbeat
	}
	if !ok || hb < at {
		at = hb
	}
	return at
}
