package dataplanetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The suite's own tests: a simple reference mode (no data path) passes
// every part that needs none, and each way of breaking it makes the part
// that holds modes to that rule fail.

// breakage is one way to break the reference mode.
type breakage int

const (
	correct         breakage = iota
	noEpochCheck             // Release and replaces ignore the epoch
	stopTwiceFails           // a second Stop reports an error
	closeNeedsStop           // Close before Stop panics on a nil channel (as herd's Release after Close did)
	leaksCapacity            // Release forgets the session but not its capacity
	leaksState               // Release leaves a per-client entry behind
	wrongKind                // capacity refused as an invalid argument
	badCounter               // a counter named against the rules
	noWindowBound            // grants the window asked for
	acceptsTwice             // one QP in two sessions
	replaceDropsOld          // the old session is released before the new admission is checked
	admitsAfterStop          // Stop stops nothing
)

// ref is the reference mode: sessions in a map, nothing served.
type refMode struct {
	broken    breakage
	epoch     uint64
	max, win  int
	mu        sync.Mutex
	sessions  map[uint64][]handshake.Endpoint
	held      map[handshake.Endpoint]uint64
	state     map[uint64]bool // per-client state (leaksState)
	used      int             // capacity in use
	next      uint64
	stopped   bool
	closed    bool
	stopCalls int
}

func refFactory(b breakage) dataplane.Factory {
	return func(ctx context.Context, c dataplane.Config) (dataplane.Mode, error) {
		return &refMode{broken: b, epoch: c.Epoch, max: c.MaxClients, win: c.MaxWindow,
			sessions: map[uint64][]handshake.Endpoint{}, held: map[handshake.Endpoint]uint64{}, state: map[uint64]bool{}}, nil
	}
}

func (m *refMode) Admit(ctx context.Context, a handshake.Admission, replaces handshake.SessionRef) (handshake.Grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var no handshake.Grant
	if m.stopped && m.broken != admitsAfterStop {
		return no, fmt.Errorf("%w: stopped", dataplane.ErrUnavailable)
	}
	prev, ok := m.sessions[replaces.ID]
	if ok && replaces.Epoch != m.epoch && m.broken != noEpochCheck {
		ok = false
	}
	if ok && m.broken == replaceDropsOld {
		m.release(replaces.ID, prev)
		ok = false
	}
	if len(a.QPs) == 0 {
		return no, fmt.Errorf("%w: no QPs", dataplane.ErrInvalidArgument)
	}
	for i, q := range a.QPs {
		if q.QPN > verbs.MaxQPN {
			return no, fmt.Errorf("%w: QPN", dataplane.ErrInvalidArgument)
		}
		for _, p := range a.QPs[:i] {
			if p == q && m.broken != acceptsTwice {
				return no, fmt.Errorf("%w: twice", dataplane.ErrInvalidArgument)
			}
		}
		if s, held := m.held[q]; held && (!ok || s != replaces.ID) && m.broken != acceptsTwice {
			return no, fmt.Errorf("%w: held", dataplane.ErrFailedPrecondition)
		}
	}
	used := m.used
	if ok {
		used--
	}
	if used >= m.max || len(a.QPs) > 64 {
		if m.broken == wrongKind {
			return no, fmt.Errorf("%w: full", dataplane.ErrInvalidArgument)
		}
		return no, fmt.Errorf("%w: full", dataplane.ErrNoCapacity)
	}
	if ok {
		m.release(replaces.ID, prev)
	}
	m.next++
	m.sessions[m.next] = a.QPs
	for _, q := range a.QPs {
		m.held[q] = m.next
	}
	m.used++
	m.state[m.next] = true
	w := a.Window
	if m.broken != noWindowBound {
		w = max(1, min(w, m.win))
	}
	return handshake.Grant{Session: m.next, Epoch: m.epoch, Window: w}, nil
}

func (m *refMode) release(id uint64, qps []handshake.Endpoint) {
	delete(m.sessions, id)
	for _, q := range qps {
		if m.held[q] == id {
			delete(m.held, q)
		}
	}
	if m.broken != leaksCapacity {
		m.used--
	}
	if m.broken != leaksState {
		delete(m.state, id)
	}
}

func (m *refMode) Release(ctx context.Context, r handshake.SessionRef) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	qps, ok := m.sessions[r.ID]
	if !ok || (r.Epoch != m.epoch && m.broken != noEpochCheck) {
		return fmt.Errorf("%w: %d", dataplane.ErrUnknownSession, r.ID)
	}
	m.release(r.ID, qps)
	return nil
}

func (m *refMode) Stats() dataplane.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := "admissions_total"
	if m.broken == badCounter {
		name = "Admissions"
	}
	return dataplane.Stats{Sessions: len(m.sessions), Counters: []dataplane.Counter{{Name: name, Help: "Sessions admitted.", Value: m.next}}}
}

func (m *refMode) Stop() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopCalls++
	if m.stopCalls > 1 && m.broken == stopTwiceFails {
		return 0, errors.New("already stopped")
	}
	if m.closed && m.broken == closeNeedsStop {
		var c chan struct{}
		close(c) // panics
	}
	m.stopped = true
	return 0, nil
}

func (m *refMode) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped, m.closed = true, true
	return nil
}

func refState(dm dataplane.Mode) map[string]int {
	m := dm.(*refMode)
	m.mu.Lock()
	defer m.mu.Unlock()
	return map[string]int{"per-client entries": len(m.state)}
}

// recorder is a testing.TB that records failures instead of failing the
// test, so that the suite's tests can see a part fail. Cleanups run
// with the real test's.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	failed  bool
	skipped bool
	msgs    []string
}

func (r *recorder) Helper() {}

// Cleanup runs f with the real test's cleanups; a broken mode's panic
// there (its Stop at the end of a part) is recorded, not raised.
func (r *recorder) Cleanup(f func()) {
	r.TB.Cleanup(func() {
		defer func() { recover() }()
		f()
	})
}
func (r *recorder) log(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, s)
}
func (r *recorder) fail(s string) {
	r.log(s)
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}
func (r *recorder) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *recorder) Error(a ...any)            { r.fail(fmt.Sprint(a...)) }
func (r *recorder) Fail()                     { r.fail("Fail") }
func (r *recorder) Fatalf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)); runtime.Goexit() }
func (r *recorder) Fatal(a ...any)            { r.fail(fmt.Sprint(a...)); runtime.Goexit() }
func (r *recorder) FailNow()                  { r.fail("FailNow"); runtime.Goexit() }
func (r *recorder) Skipf(f string, a ...any) {
	r.log(fmt.Sprintf(f, a...))
	r.skipped = true
	runtime.Goexit()
}
func (r *recorder) Skip(a ...any)           { r.log(fmt.Sprint(a...)); r.skipped = true; runtime.Goexit() }
func (r *recorder) SkipNow()                { r.skipped = true; runtime.Goexit() }
func (r *recorder) Logf(f string, a ...any) { r.log(fmt.Sprintf(f, a...)) }
func (r *recorder) Log(a ...any)            { r.log(fmt.Sprint(a...)) }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// runPart runs part p against h on a recorder, recovering a panic as a
// failure (go test would report it as one).
func runPart(t *testing.T, p Part, h *Harness) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				r.fail(fmt.Sprintf("panic: %v", v))
			}
		}()
		p.Run(r, h)
	}()
	<-done
	return r
}

func part(t *testing.T, name string) Part {
	for _, p := range Parts() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no part %q", name)
	return Part{}
}

// dataPath are the parts that need a mode that serves calls.
var dataPath = map[string]bool{"Hostile/Packets": true, "Serve": true, "SourcePorts": true, "Switch": true, "Wire": true}

func harness(b breakage) *Harness {
	return &Harness{Name: spec.ModeFaSST, Start: refFactory(b), State: refState}
}

// TestReferencePasses: the reference mode passes every part that needs
// no data path, so the failures below are the breakages'.
func TestReferencePasses(t *testing.T) {
	for _, p := range Parts() {
		if dataPath[p.Name] {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			if r := runPart(t, p, harness(correct)); r.failed || r.skipped {
				t.Fatalf("the reference mode fails or skips %s: %s", p.Name, strings.Join(r.msgs, "; "))
			}
		})
	}
}

// TestSuiteCatchesBrokenModes: each part fails a mode broken the way it
// is there to catch, and says why.
func TestSuiteCatchesBrokenModes(t *testing.T) {
	defer func(d time.Duration) { settle = d }(settle)
	settle = 200 * time.Millisecond // the reference frees at once: a leak is a leak
	for _, c := range []struct {
		part  string
		b     breakage
		catch string // in the failure message
	}{
		{"Lifecycle/ReleaseOtherEpoch", noEpochCheck, "under epoch"},
		{"Lifecycle/ReplaceOtherEpoch", noEpochCheck, "another epoch"},
		{"Lifecycle/ReplaceRefusedKeepsOld", replaceDropsOld, "refused replacing admission"},
		{"Churn", leaksCapacity, "Admit"},
		{"Churn", leaksState, "per-client entries"},
		{"StopClose/Twice", stopTwiceFails, "second Stop"},
		{"StopClose/CloseBeforeStop", closeNeedsStop, "panic"},
		{"StopClose/NoAdmitAfterStop", admitsAfterStop, "Admit after Stop"},
		{"Errors/Kinds", acceptsTwice, "another session holds"},
		{"Errors/Capacity", wrongKind, "beyond capacity"},
		{"Errors/Counters", badCounter, "not a lowercase metric name"},
		{"Hostile/Admissions", noWindowBound, "beyond MaxWindow"},
		{"Hostile/Admissions", acceptsTwice, "one QP twice"},
		// The reference serves nothing: each part that runs clients
		// fails it (in SourcePorts only as root, where it runs at all).
		{"Serve", correct, "Dial"},
		{"Hostile/Packets", correct, "Dial"},
		{"SourcePorts", correct, "Dial"},
		{"Switch", correct, "Dial"},
		{"Wire", correct, "wire"}, // as spec-s0, which the wire generator speaks
	} {
		t.Run(c.part, func(t *testing.T) {
			h := harness(c.b)
			if c.part == "Wire" {
				h.Name = spec.ModeSpecS0
			}
			r := runPart(t, part(t, c.part), h)
			if r.skipped {
				t.Skipf("%s skipped: %s", c.part, strings.Join(r.msgs, "; "))
			}
			msg := strings.Join(r.msgs, "; ")
			if !r.failed {
				t.Fatalf("%s passed a mode broken as %d: %s", c.part, c.b, msg)
			}
			if !strings.Contains(msg, c.catch) {
				t.Errorf("%s failed, but not for the breakage (%q): %s", c.part, c.catch, msg)
			}
		})
	}
}
