// Package verify checks a history of timestamp calls for seqd's three
// promises: every value is unique, each client's values increase, and
// real time is respected (a call issued after another call returned got a
// larger value).
//
// The history is a set of Calls, each with the interval in which it was
// outstanding: Start read on a monotonic clock at or before the call was
// issued, End at or after it returned. Call A precedes call B when
// A.End < B.Start; only then does the order of their values matter. Calls
// whose intervals overlap may return values in either order.
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
)

// Call is one completed call.
type Call struct {
	Start, End int64 // nanoseconds on one monotonic clock; Start <= End
	Value      uint64
}

// Kind is the promise a violation breaks.
type Kind int

// The three promises.
const (
	// Duplicate: a value was handed out more than once.
	Duplicate Kind = iota
	// Regression: a client's call got a value not above one its own
	// earlier (already returned) call got: per-client monotonicity.
	Regression
	// RealTime: a call got a value not above one another client's call
	// got, although that call returned before this one was issued.
	RealTime
)

func (k Kind) String() string {
	switch k {
	case Duplicate:
		return "duplicate"
	case Regression:
		return "client-regression"
	case RealTime:
		return "real-time"
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
	case Duplicate:
		return fmt.Sprintf("duplicate: value %d returned to client %d [%d,%d]ns and client %d [%d,%d]ns",
			v.B.Value, v.AClient, v.A.Start, v.A.End, v.BClient, v.B.Start, v.B.End)
	default:
		return fmt.Sprintf("%s: client %d's call [%d,%d]ns got %d, after client %d's call [%d,%d]ns had returned %d",
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
	Examples    []Violation // up to the limit passed to Check, per kind
}

// Violations is the total count.
func (r Report) Violations() int { return r.Duplicates + r.Regressions + r.RealTime }

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
	return fmt.Errorf("verify: %d violations in %d calls (%d duplicates, %d client regressions, %d real-time)%s",
		r.Violations(), r.Calls, r.Duplicates, r.Regressions, r.RealTime, ex)
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
	byEnd := slices.Clone(byStart)
	slices.SortFunc(byStart, func(a, b entry) int { return cmp.Compare(a.Start, b.Start) })
	slices.SortFunc(byEnd, func(a, b entry) int { return cmp.Compare(a.End, b.End) })

	counts := [3]int{}
	add := func(k Kind, a, b entry) {
		counts[k]++
		have := 0
		for _, e := range r.Examples {
			if e.Kind == k {
				have++
			}
		}
		if have < maxExamples {
			r.Examples = append(r.Examples, Violation{Kind: k, AClient: int(a.client), BClient: int(b.client), A: a.Call, B: b.Call})
		}
	}

	// The sweep: before looking at a call that starts at s, fold in every
	// call that ended strictly before s. perClient[c] is the call of
	// client c with the largest value so far; best and second are the
	// calls with the largest values held by two distinct clients, so the
	// largest value of any client other than c is best unless best is c's.
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
		if seen[b.client] && perClient[b.client].Value >= b.Value {
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
