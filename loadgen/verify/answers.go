package verify

import (
	"fmt"
	"sync"
)

// Answers checks at-most-once (PROTOCOL.md, "eRPC"): every answer to one
// request number (a session's slot's) carries the same value. A mode
// that answers a retransmitted request anew, with a fresh value, breaks
// it (kind Reanswered), even though the values stay unique.
//
// The zero Answers is empty and ready; it is safe for concurrent use.
type Answers struct {
	mu      sync.Mutex
	first   map[answerKey]uint64
	n       int
	bad     int
	example []Violation
}

type answerKey struct {
	session uint64
	slot    int
	reqNum  uint64
}

// Record adds an answer to request number reqNum of session's slot,
// carrying value; it reports false when an earlier answer to the same
// request number carried another value.
func (a *Answers) Record(session uint64, slot int, reqNum, value uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first == nil {
		a.first = map[answerKey]uint64{}
	}
	a.n++
	k := answerKey{session, slot, reqNum}
	v, seen := a.first[k]
	if !seen {
		a.first[k] = value
		return true
	}
	if v == value {
		return true
	}
	a.bad++
	if len(a.example) < examples {
		a.example = append(a.example, Violation{Kind: Reanswered, A: Call{Value: v}, B: Call{Value: value},
			AClient: int(session), BClient: int(session)})
	}
	return false
}

// Report counts the answers recorded and those that repeated a request
// number with another value.
func (a *Answers) Report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Report{Calls: a.n, Reanswered: a.bad, Examples: append([]Violation(nil), a.example...)}
}

func reansweredString(v Violation) string {
	return fmt.Sprintf("reanswered: session %d's request number answered %d, then %d", v.BClient, v.A.Value, v.B.Value)
}
