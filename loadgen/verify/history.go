package verify

import "sync"

// History records the calls of sequential callers as they return, for
// Check: the history the end-to-end tests keep. A caller is any int the
// test picks (a goroutine's index, say); it makes one call at a time and
// records each call after it returned, in the order made. History then
// knows each caller's order even where clock readings cannot show it (a
// call that starts in the same clock tick as the caller's previous one
// ended), and checks each caller's values against all its earlier ones.
//
// The zero History is empty and ready; it is safe for concurrent use.
type History struct {
	mu    sync.Mutex
	index map[int]int // caller -> position in calls and ids
	ids   []int
	calls [][]Call
	n     int
}

// Record adds a call of caller, made after every call Record has seen
// from caller returned.
func (h *History) Record(caller int, c Call) {
	h.mu.Lock()
	i, ok := h.index[caller]
	if !ok {
		if h.index == nil {
			h.index = map[int]int{}
		}
		i = len(h.ids)
		h.index[caller] = i
		h.ids = append(h.ids, caller)
		h.calls = append(h.calls, nil)
	}
	h.calls[i] = append(h.calls[i], c)
	h.n++
	h.mu.Unlock()
}

// Len is the number of calls recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// examples is how many examples of each kind Check keeps.
const examples = 3

// Check verifies the calls recorded so far: every value unique, each
// caller's values increasing in the order it made its calls, and real
// time respected across callers. Examples name callers by the numbers
// Record was given.
func (h *History) Check() Report {
	h.mu.Lock()
	clients := make([][][]Call, len(h.calls))
	for i, cs := range h.calls {
		clients[i] = [][]Call{cs[:len(cs):len(cs)]}
	}
	ids := append([]int(nil), h.ids...)
	h.mu.Unlock()
	return check(clients, ids, examples, true)
}
