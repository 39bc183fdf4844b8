package client

import "time"

// timer is a request slot's timeout: busy while its request is in
// flight, until deadline.
type timer struct {
	deadline time.Duration
	busy     bool
}

// timed is a transport's per-QP state whose request slots time out
// (fasst, herd, rfp): slot s's timer is timers()[s].
type timed interface{ timers() []timer }

// nextDeadline is the earliest deadline of a busy slot of qps, if any.
// Nothing allocates.
func nextDeadline[Q timed](qps []Q) (d time.Duration, ok bool) {
	for _, q := range qps {
		for _, tm := range q.timers() {
			if tm.busy && (!ok || tm.deadline < d) {
				d, ok = tm.deadline, true
			}
		}
	}
	return d, ok
}

// expire calls retry(qi, s) for each busy slot s of qps[qi] whose
// deadline is not after now, then, if after is not nil, after(q) once
// per QP (its error is dropped: what it did not send times out again),
// and returns how many slots it retried. retry may renew the slot (a new
// deadline). Nothing allocates.
func expire[Q timed](qps []Q, now time.Duration, retry func(qi, s int), after func(q Q) error) int {
	n := 0
	for qi, q := range qps {
		ts := q.timers()
		for s := range ts {
			if tm := &ts[s]; tm.busy && now >= tm.deadline {
				retry(qi, s)
				n++
			}
		}
		if after != nil {
			after(q)
		}
	}
	return n
}
