package worker

import (
	"iter"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Swept is a client whose request slots a worker sweeps (herd, rfp): the
// client WRITEs requests into its slots, which complete nothing at the
// server, so a request's arrival is bounded from below by the start of
// the last sweep that read all of the client's slots (Seen).
type Swept interface {
	// Window is the number of the client's slots.
	Window() int
	// Seen is the client's arrival bound, owned by the sweeping worker.
	Seen() *verbs.Time
}

// Sweep is a worker's progress over its clients' request slots, batch
// after batch. Owned by the worker.
type Sweep struct {
	cur int // the client the next sweep starts at
	// Start is when the sweep in progress started, before any slot of it
	// was read; Oldest is the arrival bound of the oldest request Fresh
	// let into its batch.
	Start, Oldest verbs.Time
}

// Slots starts a sweep of clients and yields each of their slots (the
// client and the slot's position), from the client the last sweep
// stopped at. A client all of whose slots were yielded gets the sweep's
// Start as its arrival bound. The caller breaks out when its batch is
// full; the next sweep then starts with that client again, or with the
// next one if its last slot was the one taken. Nothing allocates.
func Slots[C Swept](sw *Sweep, clients []C) iter.Seq2[C, int] {
	return func(yield func(C, int) bool) {
		sw.Start = verbs.Now()
		sw.Oldest = sw.Start
		n := len(clients)
		if n == 0 {
			return
		}
		if sw.cur >= n {
			sw.cur = 0
		}
		first := sw.cur
		for k := range n {
			ci := (first + k) % n
			c := clients[ci]
			w := c.Window()
			for pos := range w {
				if !yield(c, pos) {
					sw.cur = ci
					if pos == w-1 {
						*c.Seen() = sw.Start
						sw.cur = (ci + 1) % n
					}
					return
				}
			}
			*c.Seen() = sw.Start
		}
		sw.cur = (first + 1) % n
	}
}

// Fresh reports whether a request found in the slots of a client whose
// arrival bound is seen may join the sweep's batch: not when that bound
// is older than spec.MaxResidence at the sweep's start (the worker did
// not sweep the client for a while; the caller drops the request alone,
// so that it does not age the rest of the batch). If it may, Oldest
// takes the bound into account.
func (s *Sweep) Fresh(seen verbs.Time) bool {
	if s.Start.Sub(seen) > spec.MaxResidence {
		return false
	}
	s.Oldest = min(s.Oldest, seen)
	return true
}
