// Package verify checks timestamps against seqd's three promises: every
// value is unique, each client's values increase, and real time is
// respected (a call issued after another call returned got a larger
// value). It is the one checker of the tree: loadgen, its wire engine,
// the end-to-end tests (package e2e and the multi-host rig) and the
// modes' own tests all use it, and Kind is the one list of the promises
// a value can break.
//
// It checks in two ways:
//
//   - A history after the fact (Check, CheckChunked, History): a set of
//     Calls, each with the interval in which it was outstanding: Start
//     read on a monotonic clock at or before the call was issued, End at
//     or after it returned. Call A precedes call B when A.End < B.Start;
//     only then does the order of their values matter. Calls whose
//     intervals overlap may return values in either order. A History
//     records sequential callers, so it also knows the order of one
//     caller's calls when their intervals merely touch.
//   - Online, as answers arrive (Online), for a generator that knows, at
//     each send, the largest value it had received before it: no clocks
//     and no records beyond the values kept for uniqueness.
//
// Check runs in O(n log n) time: it sorts the calls by start and by end
// and sweeps both orders together, keeping the largest value among the
// calls that have ended so far — per client, and the two largest held by
// distinct clients, so that each call is compared with the largest value
// any other client obtained before it began.
package verify

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Call is one completed call.
type Call struct {
	// Start and End are readings of one monotonic clock (time since an
	// origin the history shares); Start <= End.
	Start, End time.Duration
	Value      uint64
}

// Kind is the promise a violation breaks.
type Kind int

// The three promises.
const (
	// Duplicate: a value was handed out more than once.
	Duplicate Kind = iota
	// Regression: a client's call got a value not above one its own
	// earlier (already returned) call got: per-client monotonicity. (In
	// the wire engine a client is a flow: one client QP's requests.)
	Regression
	// RealTime: a call got a value not above one another client's call
	// got, although that call returned before this one was issued.
	RealTime
	// Reanswered: one request number (an eRPC session's slot's) was
	// answered with two values: a retransmission ran the request again
	// (at-most-once; checked by Answers).
	Reanswered

	numKinds = 4
)

func (k Kind) String() string {
	switch k {
	case Duplicate:
		return "duplicate"
	case Regression:
		return "client-regression"
	case RealTime:
		return "real-time"
	case Reanswered:
		return "reanswered"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Violation is one example: call B (of client BClient) breaks the promise
// with respect to call A (of client AClient).
type Violation struct {
	Kind             Kind
	AClient, BClient int
	A, B             Call
}

func (v Violation) String() string {
	switch v.Kind {
	case Reanswered:
		return reansweredString(v)
	case Duplicate:
		return fmt.Sprintf("duplicate: value %d returned to client %d [%v,%v] and client %d [%v,%v]",
			v.B.Value, v.AClient, v.A.Start, v.A.End, v.BClient, v.B.Start, v.B.End)
	default:
		return fmt.Sprintf("%s: client %d's call [%v,%v] got %d, after client %d's call [%v,%v] had returned %d",
			v.Kind, v.BClient, v.B.Start, v.B.End, v.B.Value, v.AClient, v.A.Start, v.A.End, v.A.Value)
	}
}

// Report is the outcome of Check. Each count is a number of calls: a call
// is counted once per promise it breaks.
type Report struct {
	Calls       int
	Duplicates  int // calls whose value an earlier-sorted call already had
	Regressions int
	RealTime    int
	// Reanswered counts answers that repeated a request number with
	// another value (Answers).
	Reanswered int
	Examples   []Violation // up to the limit passed to Check, per kind
}

// Violations is the total count.
func (r Report) Violations() int { return r.Duplicates + r.Regressions + r.RealTime + r.Reanswered }

// OK reports whether the history is clean.
func (r Report) OK() bool { return r.Violations() == 0 }

// Err returns nil for a clean history, else an error that names the counts
// and the first example.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	ex := ""
	if len(r.Examples) > 0 {
		ex = "; e.g. " + r.Examples[0].String()
	}
	return fmt.Errorf("verify: %d violations in %d calls (%d duplicates, %d client regressions, %d real-time, %d reanswered)%s",
		r.Violations(), r.Calls, r.Duplicates, r.Regressions, r.RealTime, r.Reanswered, ex)
}

type entry struct {
	Call
	client int32
}

// Check verifies the calls of each client (clients[i] holds client i's
// calls, in any order) and returns counts and up to maxExamples examples
// of each kind. It does not modify clients.
func Check(clients [][]Call, maxExamples int) Report {
	chunked := make([][][]Call, len(clients))
	for i, cs := range clients {
		chunked[i] = [][]Call{cs}
	}
	return CheckChunked(chunked, maxExamples)
}

// CheckChunked is Check for histories kept in chunks: clients[i] is
// client i's calls, split over any number of slices.
func CheckChunked(clients [][][]Call, maxExamples int) Report {
	return check(clients, nil, maxExamples, false)
}

// check is Check. With sequential, each client's calls are in the order
// the client made them, one after another returned (History): a call is
// a regression when its value is not above every value the client got
// before, whatever the clock readings. ids, when not nil, names client i
// in examples.
func check(clients [][][]Call, ids []int, maxExamples int, sequential bool) Report {
	n := 0
	for _, chunks := range clients {
		for _, cs := range chunks {
			n += len(cs)
		}
	}
	r := Report{Calls: n}
	if n == 0 {
		return r
	}
	byStart := make([]entry, 0, n)
	for ci, chunks := range clients {
		for _, cs := range chunks {
			for _, c := range cs {
				byStart = append(byStart, entry{c, int32(ci)})
			}
		}
	}

	var counts [numKinds]int
	var have [numKinds]int
	add := func(k Kind, a, b entry) {
		counts[k]++
		if have[k] < maxExamples {
			have[k]++
			ac, bc := int(a.client), int(b.client)
			if ids != nil {
				ac, bc = ids[ac], ids[bc]
			}
			r.Examples = append(r.Examples, Violation{Kind: k, AClient: ac, BClient: bc, A: a.Call, B: b.Call})
		}
	}

	if sequential {
		// Each client's calls in the order made: byStart still holds
		// them so, client by client.
		for i := 0; i < len(byStart); {
			best := byStart[i]
			for i++; i < len(byStart) && byStart[i].client == best.client; i++ {
				if b := byStart[i]; b.Value <= best.Value {
					add(Regression, best, b)
				} else {
					best = b
				}
			}
		}
	}

	byEnd := slices.Clone(byStart)
	slices.SortFunc(byStart, func(a, b entry) int { return cmp.Compare(a.Start, b.Start) })
	slices.SortFunc(byEnd, func(a, b entry) int { return cmp.Compare(a.End, b.End) })

	// The sweep: before looking at a call that starts at s, fold in every
	// call that ended strictly before s. perClient[c] is the call of
	// client c with the largest value so far; best and second are the
	// calls with the largest values held by two distinct clients, so the
	// largest value of any client other than c is best unless best is c's.
	// (A sequential client's own order was checked above; it implies the
	// order of its calls' intervals.)
	perClient := make([]entry, len(clients))
	seen := make([]bool, len(clients))
	var best, second entry
	haveBest, haveSecond := false, false
	j := 0
	for _, b := range byStart {
		for j < len(byEnd) && byEnd[j].End < b.Start {
			a := byEnd[j]
			j++
			if !seen[a.client] || a.Value > perClient[a.client].Value {
				perClient[a.client], seen[a.client] = a, true
			}
			switch {
			case !haveBest:
				best, haveBest = a, true
			case a.client == best.client:
				if a.Value > best.Value {
					best = a
				}
			case a.Value > best.Value:
				second, haveSecond = best, true
				best = a
			case !haveSecond || a.Value > second.Value:
				second, haveSecond = a, true
			}
		}
		if !sequential && seen[b.client] && perClient[b.client].Value >= b.Value {
			add(Regression, perClient[b.client], b)
		}
		if haveBest && best.client != b.client && best.Value >= b.Value {
			add(RealTime, best, b)
		} else if haveSecond && best.client == b.client && second.Value >= b.Value {
			add(RealTime, second, b)
		}
	}

	// Uniqueness: sort by value and compare neighbours.
	byValue := byEnd
	slices.SortFunc(byValue, func(a, b entry) int { return cmp.Compare(a.Value, b.Value) })
	for i := 1; i < len(byValue); i++ {
		if byValue[i].Value == byValue[i-1].Value {
			add(Duplicate, byValue[i-1], byValue[i])
		}
	}
	r.Duplicates, r.Regressions, r.RealTime = counts[Duplicate], counts[Regression], counts[RealTime]
	return r
}
