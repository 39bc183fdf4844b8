package wire

import (
	"fmt"

	"github.com/seqd/seqd/spec"
)

// herdSlot is one window position of a HERD flow.
type herdSlot struct {
	seq       spec.Seq
	busy      bool
	sentAt    int64
	floor     uint64
	flowFloor uint64
}

// HerdFlow is the protocol state of one emulated HERD client QP: its
// window positions (slots in the server's request region), the sequence
// number each was last written with, and whether an answer is awaited.
// Like Flow it is pure. A position is written again only with a fresh
// sequence number, so an answer to an earlier write never matches.
type HerdFlow struct {
	pos  []herdSlot
	free []uint8 // free positions, a stack
	max  uint64
}

// NewHerdFlow returns a flow of window positions.
func NewHerdFlow(window int) (*HerdFlow, error) {
	if window < 1 || window > spec.HERDMaxWindow {
		return nil, fmt.Errorf("wire: herd window %d (1..%d)", window, spec.HERDMaxWindow)
	}
	f := &HerdFlow{pos: make([]herdSlot, window), free: make([]uint8, window)}
	for i := range f.free {
		f.free[i] = uint8(window - 1 - i)
	}
	return f, nil
}

// Window is the number of positions.
func (f *HerdFlow) Window() int { return len(f.pos) }

// Outstanding is the number of positions awaiting an answer.
func (f *HerdFlow) Outstanding() int { return len(f.pos) - len(f.free) }

// Max is the largest value the flow received.
func (f *HerdFlow) Max() uint64 { return f.max }

// Send takes a free position for a write at now and gives it a fresh
// sequence number, or reports false when every position is busy.
func (f *HerdFlow) Send(now int64, floor uint64) (int, spec.Seq, bool) {
	n := len(f.free)
	if n == 0 {
		return 0, 0, false
	}
	p := int(f.free[n-1])
	f.free = f.free[:n-1]
	s := &f.pos[p]
	s.seq = s.seq.Next()
	s.busy, s.sentAt, s.floor, s.flowFloor = true, now, floor, f.max
	return p, s.seq, true
}

// Answer matches an answer for (pos, seq): it returns the write it
// answers and frees the position, or false for an answer to an earlier
// write, a duplicate, or a position outside the window.
func (f *HerdFlow) Answer(pos int, seq spec.Seq) (Sent, bool) {
	if pos < 0 || pos >= len(f.pos) {
		return Sent{}, false
	}
	s := &f.pos[pos]
	if !s.busy || s.seq != seq {
		return Sent{}, false
	}
	s.busy = false
	f.free = append(f.free, uint8(pos))
	return Sent{At: s.sentAt, High: NoHigh, Floor: s.floor, FlowFloor: s.flowFloor}, true
}

// Accept records v, an answer's value the checks let through.
func (f *HerdFlow) Accept(v uint64) { f.max = max(f.max, v) }

// Expire gives up the writes unanswered since before now-timeout and
// returns how many. Their positions are free again: the next write there
// carries a new sequence number, which a late answer does not match.
func (f *HerdFlow) Expire(now, timeout int64) int {
	n := 0
	for p := range f.pos {
		if s := &f.pos[p]; s.busy && now-s.sentAt >= timeout {
			s.busy = false
			f.free = append(f.free, uint8(p))
			n++
		}
	}
	return n
}
