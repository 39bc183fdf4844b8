package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
)

// HeldLoad is clients calling GetTimestamp in a loop (300 ms a call) until
// Halt, every answer recorded in V, while the test moves the server
// through events (restarts, mode switches, failovers); over an event it
// can hold one client back (HeldOver), so that this client reconnects
// last. It logs, per client, the end of every successful call.
type HeldLoad struct {
	V       verify.History
	clients []*client.Client
	origin  time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	hold    []atomic.Bool // the client waits
	busy    []atomic.Bool // the client is in a call

	mu     sync.Mutex
	ends   [][]time.Duration
	errs   []int
	resets [][]time.Duration // when a client held back by the test was let go
}

// StartHeldLoad starts a caller per client; ctx bounds every call. The
// caller closes the clients, after Halt.
func StartHeldLoad(ctx context.Context, clients []*client.Client) *HeldLoad {
	n := len(clients)
	l := &HeldLoad{clients: clients, origin: time.Now(), stop: make(chan struct{}), hold: make([]atomic.Bool, n),
		busy: make([]atomic.Bool, n), ends: make([][]time.Duration, n), errs: make([]int, n), resets: make([][]time.Duration, n)}
	for id, c := range clients {
		l.wg.Add(1)
		go l.caller(ctx, id, c)
	}
	return l
}

func (l *HeldLoad) caller(ctx context.Context, id int, c *client.Client) {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		if l.hold[id].Load() {
			time.Sleep(time.Millisecond) // held back by the test
			continue
		}
		l.busy[id].Store(true)
		s := l.Now()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		ts, err := c.GetTimestamp(cctx)
		cancel()
		e := l.Now()
		l.busy[id].Store(false)
		l.mu.Lock()
		if err == nil {
			l.V.Record(id, verify.Call{Start: s, End: e, Value: uint64(ts)})
			l.ends[id] = append(l.ends[id], e)
		} else {
			l.errs[id]++
		}
		l.mu.Unlock()
		if err == nil {
			time.Sleep(200 * time.Microsecond) // keep the two shared cores for the servers too
		}
	}
}

// Now is the time since the load started.
func (l *HeldLoad) Now() time.Duration { return time.Since(l.origin) }

// Halt stops the callers and waits for them. Later calls do nothing.
func (l *HeldLoad) Halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// Served is the number of client c's successful calls that ended after
// after.
func (l *HeldLoad) Served(c int, after time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ends[c] {
		if e > after {
			n++
		}
	}
	return n
}

// Errors is the number of client c's failed calls.
func (l *HeldLoad) Errors(c int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errs[c]
}

// EveryoneServed waits until every client not held back has n successful
// calls ending after at, and returns how long the slowest took; it fails
// the test if one has not within within.
func (l *HeldLoad) EveryoneServed(t testing.TB, what string, at time.Duration, n int, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok := true
		var got []int
		for c := range l.clients {
			got = append(got, l.Served(c, at))
			if got[c] < n && !l.hold[c].Load() {
				ok = false
			}
		}
		if ok {
			return l.Now() - at
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: clients served %v times within %v of it, want %d each", what, got, within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// HeldOver runs event with client h held back (not in a call) until
// event returns. Then it lets h go, and every client must be served 20
// times within 3 s; it returns how long that took.
func (l *HeldLoad) HeldOver(t testing.TB, h int, what string, event func()) time.Duration {
	t.Helper()
	l.hold[h].Store(true)
	for l.busy[h].Load() {
		time.Sleep(time.Millisecond)
	}
	event()
	l.mu.Lock()
	l.resets[h] = append(l.resets[h], l.Now())
	l.mu.Unlock()
	at := l.Now()
	l.hold[h].Store(false)
	return l.EveryoneServed(t, fmt.Sprintf("%s, after the held-back client %d reconnected", what, h), at, 20, 3*time.Second)
}

// LongestGap is client c's longest stretch without a successful call
// between from and to, and when it began; the time the test held the
// client back is no gap.
func (l *HeldLoad) LongestGap(c int, from, to time.Duration) (gap, at time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := from
	r := l.resets[c]
	for _, e := range l.ends[c] {
		if e < from || e > to {
			continue
		}
		for len(r) > 0 && r[0] <= e {
			prev = max(prev, r[0])
			r = r[1:]
		}
		if e-prev > gap {
			gap, at = e-prev, prev
		}
		prev = e
	}
	if to-prev > gap {
		gap, at = to-prev, prev
	}
	return gap, at
}
