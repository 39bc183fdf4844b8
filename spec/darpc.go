package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// DaRPC (mode darpc): RC SEND/RECV between each client QP and a server QP
// of its own. A client SEND carries one call message asking for Count
// values; the server answers it with one SEND carrying the first of Count
// consecutive values, echoing the call ID (PROTOCOL.md, "DaRPC").
//
// Call (client → server), DaRPCCallLen bytes, big endian:
//
//	 0        1        2                 4                                12
//	+--------+--------+-----------------+---------------------------------+
//	|version | kind=1 |  count (16)     |        call ID (64)             |
//	+--------+--------+-----------------+---------------------------------+
//
// Answer (server → client), DaRPCAnswerLen bytes, big endian:
//
//	 0        1        2                 4                 12             20
//	+--------+--------+-----------------+-----------------+---------------+
//	|version | kind   |  count (16)     |  call ID (64)   |  first (64)   |
//	+--------+--------+-----------------+-----------------+---------------+
//
// kind 2 (values): the call's values are first … first+count−1. kind 3
// (refused): no values (first is 0); the server could not answer within
// MaxResidence and the client sends the calls again under a new call ID.
const (
	DaRPCVersion   = 1
	DaRPCCallLen   = 12
	DaRPCAnswerLen = 20
	// DaRPCMaxCalls is the most calls one message carries.
	DaRPCMaxCalls = 64
	// DaRPCMaxWindow is the largest window (calls in flight per client
	// QP, hence also call messages: each carries at least one) a server
	// grants; it posts that many receives per connection.
	DaRPCMaxWindow = 1024
	// DaRPCStall is how long a client waits for the answer to its oldest
	// call message on a QP before it takes the connection for broken and
	// reconnects. A live server answers (or refuses) every message within
	// MaxResidence of its arrival, and RC retransmits lost packets in
	// both directions (17 ms timeouts, 7 retries: at most about 270 ms
	// for a call and its answer together), so only a server that stopped
	// or a connection it gave up on stays silent that long.
	DaRPCStall = 500 * time.Millisecond
)

// DaRPCKind is the second byte of a DaRPC message.
type DaRPCKind uint8

// DaRPC message kinds.
const (
	DaRPCCall    DaRPCKind = 1
	DaRPCValues  DaRPCKind = 2
	DaRPCRefused DaRPCKind = 3
)

func (k DaRPCKind) String() string {
	switch k {
	case DaRPCCall:
		return "call"
	case DaRPCValues:
		return "values"
	case DaRPCRefused:
		return "refused"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Errors of the DaRPC decoders.
var (
	ErrDaRPCVersion = errors.New("spec: bad darpc version")
	ErrDaRPCKind    = errors.New("spec: bad darpc message kind")
	ErrDaRPCCount   = errors.New("spec: darpc count out of range")
)

// DaRPCMsg is a decoded DaRPC message: a call (First unused) or an answer.
type DaRPCMsg struct {
	Kind  DaRPCKind
	Count int
	ID    uint64
	First uint64
}

// PutDaRPCCall encodes a call for count values (1..DaRPCMaxCalls) under
// call ID id into b, which must hold DaRPCCallLen bytes.
func PutDaRPCCall(b []byte, id uint64, count int) error {
	if len(b) < DaRPCCallLen {
		return fmt.Errorf("%w: call buffer of %d bytes, want %d", ErrBadLength, len(b), DaRPCCallLen)
	}
	if count < 1 || count > DaRPCMaxCalls {
		return fmt.Errorf("%w: %d", ErrDaRPCCount, count)
	}
	b[0], b[1] = DaRPCVersion, byte(DaRPCCall)
	binary.BigEndian.PutUint16(b[2:], uint16(count))
	binary.BigEndian.PutUint64(b[4:], id)
	return nil
}

// DecodeDaRPCCall decodes a received call message (untrusted bytes).
func DecodeDaRPCCall(b []byte) (DaRPCMsg, error) {
	if len(b) != DaRPCCallLen {
		return DaRPCMsg{}, fmt.Errorf("%w: call of %d bytes, want %d", ErrBadLength, len(b), DaRPCCallLen)
	}
	m := DaRPCMsg{Kind: DaRPCKind(b[1]), Count: int(binary.BigEndian.Uint16(b[2:])), ID: binary.BigEndian.Uint64(b[4:])}
	switch {
	case b[0] != DaRPCVersion:
		return m, fmt.Errorf("%w: %d", ErrDaRPCVersion, b[0])
	case m.Kind != DaRPCCall:
		return m, fmt.Errorf("%w: %v in a call", ErrDaRPCKind, m.Kind)
	case m.Count < 1 || m.Count > DaRPCMaxCalls:
		return m, fmt.Errorf("%w: %d", ErrDaRPCCount, m.Count)
	}
	return m, nil
}

// PutDaRPCAnswer encodes the answer to call id for count values starting
// at first (kind DaRPCValues) or its refusal (DaRPCRefused, first 0) into
// b, which must hold DaRPCAnswerLen bytes.
func PutDaRPCAnswer(b []byte, kind DaRPCKind, id uint64, count int, first uint64) error {
	if len(b) < DaRPCAnswerLen {
		return fmt.Errorf("%w: answer buffer of %d bytes, want %d", ErrBadLength, len(b), DaRPCAnswerLen)
	}
	if count < 1 || count > DaRPCMaxCalls {
		return fmt.Errorf("%w: %d", ErrDaRPCCount, count)
	}
	switch kind {
	case DaRPCValues:
	case DaRPCRefused:
		first = 0
	default:
		return fmt.Errorf("%w: %v in an answer", ErrDaRPCKind, kind)
	}
	b[0], b[1] = DaRPCVersion, byte(kind)
	binary.BigEndian.PutUint16(b[2:], uint16(count))
	binary.BigEndian.PutUint64(b[4:], id)
	binary.BigEndian.PutUint64(b[12:], first)
	return nil
}

// RefuseDaRPCAnswer turns an encoded answer of kind DaRPCValues into its
// refusal in place: the server does it when the answers of a batch would
// leave later than MaxResidence after their calls arrived.
func RefuseDaRPCAnswer(b []byte) {
	b[1] = byte(DaRPCRefused)
	binary.BigEndian.PutUint64(b[12:], 0)
}

// DecodeDaRPCAnswer decodes a received answer (untrusted bytes). A values
// answer whose range first … first+count−1 wraps past 2^64−1 is refused
// as malformed, and so is a refusal carrying a value.
func DecodeDaRPCAnswer(b []byte) (DaRPCMsg, error) {
	if len(b) != DaRPCAnswerLen {
		return DaRPCMsg{}, fmt.Errorf("%w: answer of %d bytes, want %d", ErrBadLength, len(b), DaRPCAnswerLen)
	}
	m := DaRPCMsg{Kind: DaRPCKind(b[1]), Count: int(binary.BigEndian.Uint16(b[2:])), ID: binary.BigEndian.Uint64(b[4:]),
		First: binary.BigEndian.Uint64(b[12:])}
	switch {
	case b[0] != DaRPCVersion:
		return m, fmt.Errorf("%w: %d", ErrDaRPCVersion, b[0])
	case m.Kind != DaRPCValues && m.Kind != DaRPCRefused:
		return m, fmt.Errorf("%w: %v in an answer", ErrDaRPCKind, m.Kind)
	case m.Count < 1 || m.Count > DaRPCMaxCalls:
		return m, fmt.Errorf("%w: %d", ErrDaRPCCount, m.Count)
	case m.Kind == DaRPCRefused && m.First != 0:
		return m, fmt.Errorf("%w: a refusal carrying value %d", ErrDaRPCKind, m.First)
	case m.Kind == DaRPCValues && (m.First == 0 || m.First+uint64(m.Count-1) < m.First):
		return m, fmt.Errorf("%w: values %d … +%d", ErrDaRPCCount, m.First, m.Count-1)
	}
	return m, nil
}

// DaRPCRing is a client QP's call messages in flight, the pure part of
// the client's matching: at most window calls (each message carries at
// least one, so at most window messages), under consecutive call IDs. An
// answer is taken only for a message in flight under exactly its call ID,
// once. The transport keeps per-slot data (which requests a message
// carries) in arrays indexed by the slot Open returns.
type DaRPCRing struct {
	slots []darpcSlot
	next  uint64 // the call ID of the next message
	low   uint64 // no message below it is in flight
	calls int    // calls in flight
}

type darpcSlot struct {
	id   uint64
	n    int
	sent time.Duration
	busy bool
}

// NewDaRPCRing returns an empty ring for window calls whose first message
// gets call ID first (a client draws it at random per connection, so that
// even IDs of two connections do not repeat).
func NewDaRPCRing(window int, first uint64) *DaRPCRing {
	return &DaRPCRing{slots: make([]darpcSlot, max(window, 1)), next: first, low: first}
}

// Free is how many more calls the window takes.
func (r *DaRPCRing) Free() int { return len(r.slots) - r.calls }

// Calls is how many calls are in flight.
func (r *DaRPCRing) Calls() int { return r.calls }

// Open starts a message of n calls sent at now: it returns its call ID
// and slot, or ok false when the window has no room for n more calls or
// the slot of the next call ID still holds a message.
func (r *DaRPCRing) Open(now time.Duration, n int) (id uint64, slot int, ok bool) {
	if n < 1 || n > DaRPCMaxCalls || n > r.Free() {
		return 0, 0, false
	}
	slot = int(r.next % uint64(len(r.slots)))
	s := &r.slots[slot]
	if s.busy {
		return 0, 0, false
	}
	id = r.next
	*s = darpcSlot{id: id, n: n, sent: now, busy: true}
	r.next++
	r.calls += n
	return id, slot, true
}

// Unsend takes back the message Open just returned (its post failed).
func (r *DaRPCRing) Unsend(id uint64) {
	if id+1 != r.next {
		return
	}
	s := &r.slots[id%uint64(len(r.slots))]
	if s.busy && s.id == id {
		r.calls -= s.n
		s.busy = false
		r.next--
	}
}

// Answer takes the answer for call ID id carrying count values: the slot
// and call count of its message, or ok false (the message is not in
// flight, or carried another number of calls), which the caller counts
// as stale and drops.
func (r *DaRPCRing) Answer(id uint64, count int) (slot, n int, ok bool) {
	slot = int(id % uint64(len(r.slots)))
	s := &r.slots[slot]
	if !s.busy || s.id != id || s.n != count {
		return 0, 0, false
	}
	s.busy = false
	r.calls -= s.n
	return slot, s.n, true
}

// Oldest is when the oldest message in flight was sent.
func (r *DaRPCRing) Oldest() (time.Duration, bool) {
	for ; r.low != r.next; r.low++ {
		if s := &r.slots[r.low%uint64(len(r.slots))]; s.busy && s.id == r.low {
			return s.sent, true
		}
	}
	return 0, false
}
