package wire

import (
	"fmt"

	"github.com/seqd/seqd/spec"
)

// NoHigh marks a request sent without a guess: its answer must carry the
// full value.
const NoHigh = ^uint64(0)

// Slot states.
const (
	slotFree uint8 = iota
	slotOut
)

// slot is one tag of a flow: the request it is outstanding for, or when
// it may be used again.
type slot struct {
	seq       uint32 // the send number the tag was last used for
	state     uint8
	sentAt    int64  // batch clock of the send, ns
	reusable  int64  // free: not before this time (quarantine)
	floor     uint64 // largest value received over all flows when sent
	flowFloor uint64 // largest value this flow had received when sent
	high      uint64 // the high part the guess came from; NoHigh: none
}

// Flow is the protocol state of one emulated client QP: its window, its
// tags and the requests outstanding under them. It is pure: time is
// passed in (ns on the generator's batch clock) and it does no I/O.
//
// Tags are handed out cyclically over a space of Tags() tags (a power of
// two, at most spec.NumTags); a tag is reused only when its previous use
// was answered or given up and its quarantine has passed.
type Flow struct {
	window int
	out    int
	next   uint32 // send number of the next request
	tail   uint32 // no request below it is outstanding
	mask   uint32
	slots  []slot
	max    uint64 // largest value this flow received
	// Quarantines of a tag released by its answer and by its timeout.
	answerQ, expireQ int64
}

// FlowConfig configures a Flow.
type FlowConfig struct {
	Window int // requests outstanding at most (1..spec.MaxWindow)
	// AnswerQuarantine is how long a tag released by its answer waits
	// before reuse; ExpireQuarantine one given up after its timeout
	// (at least spec.MaxAnswerDelay; 0: spec.DefaultQuarantine).
	AnswerQuarantine, ExpireQuarantine int64
}

// NewFlow returns a flow with no request outstanding.
func NewFlow(c FlowConfig) (*Flow, error) {
	if c.Window < 1 || c.Window > spec.MaxWindow {
		return nil, fmt.Errorf("wire: window %d (1..%d)", c.Window, spec.MaxWindow)
	}
	if c.ExpireQuarantine == 0 {
		c.ExpireQuarantine = int64(spec.DefaultQuarantine)
	}
	if c.ExpireQuarantine < int64(spec.MaxAnswerDelay) || c.AnswerQuarantine < 0 {
		return nil, fmt.Errorf("wire: quarantine %d/%d ns (timeout's at least %v)", c.AnswerQuarantine, c.ExpireQuarantine, spec.MaxAnswerDelay)
	}
	tags := TagsFor(c.Window)
	f := &Flow{window: c.Window, mask: uint32(tags - 1), slots: make([]slot, tags),
		answerQ: c.AnswerQuarantine, expireQ: c.ExpireQuarantine}
	return f, nil
}

// TagsFor is the tag space a flow with window w cycles over: 16 tags per
// request it may have outstanding, at least 64, at most spec.NumTags.
// Cycling over fewer tags than the protocol's keeps the state of a
// thousand flows in a few MB; a tag still comes back only after 16
// windows' worth of sends.
func TagsFor(w int) int {
	n := 64
	for n < 16*w && n < spec.NumTags {
		n <<= 1
	}
	return n
}

// Window is the flow's window.
func (f *Flow) Window() int { return f.window }

// Outstanding is the number of requests in flight.
func (f *Flow) Outstanding() int { return f.out }

// Max is the largest value the flow received.
func (f *Flow) Max() uint64 { return f.max }

// Tags is the size of the flow's tag space.
func (f *Flow) Tags() int { return len(f.slots) }

// Send takes the next tag for a request sent at now (the batch clock)
// with the given guess high part and global floor, or reports false when
// the window is full or the next tag is still outstanding or in
// quarantine.
func (f *Flow) Send(now int64, high, floor uint64) (spec.Tag, bool) {
	if f.out >= f.window {
		return 0, false
	}
	s := &f.slots[f.next&f.mask]
	if s.state == slotOut || now < s.reusable {
		return 0, false
	}
	*s = slot{seq: f.next, state: slotOut, sentAt: now, floor: floor, flowFloor: f.max, high: high}
	t := spec.Tag(f.next & f.mask)
	f.next++
	f.out++
	return t, true
}

// Unsend gives back the tag of the last Send (a request that could not
// be written): it may be used at once, as nothing was sent under it.
func (f *Flow) Unsend() {
	f.next--
	f.out--
	f.slots[f.next&f.mask] = slot{seq: f.next - uint32(len(f.slots))}
}

// Sent is what a request carried: when it was sent and what the answer
// is checked against.
type Sent struct {
	At        int64
	High      uint64 // NoHigh: sent without a guess
	Floor     uint64
	FlowFloor uint64
}

// Answer matches an answer's tag at now: it returns the request it
// answers and releases the tag, or false when no request is outstanding
// under it (a stale or duplicate answer, or a tag outside the flow's
// space).
func (f *Flow) Answer(now int64, t spec.Tag) (Sent, bool) {
	if uint32(t) > f.mask {
		return Sent{}, false
	}
	s := &f.slots[t]
	if s.state != slotOut {
		return Sent{}, false
	}
	s.state = slotFree
	s.reusable = now + f.answerQ
	f.out--
	return Sent{At: s.sentAt, High: s.high, Floor: s.floor, FlowFloor: s.flowFloor}, true
}

// Accept records v, an answer's value the checks let through.
func (f *Flow) Accept(v uint64) { f.max = max(f.max, v) }

// Expire gives up the requests outstanding since before now-timeout and
// returns how many; their tags are quarantined. The cost is amortized
// O(1): requests are looked at in send order, and each once.
func (f *Flow) Expire(now, timeout int64) int {
	n := 0
	for f.tail != f.next {
		s := &f.slots[f.tail&f.mask]
		if s.state == slotOut && s.seq == f.tail {
			if now-s.sentAt < timeout {
				break
			}
			s.state = slotFree
			s.reusable = now + f.expireQ
			f.out--
			n++
		}
		f.tail++
	}
	return n
}
