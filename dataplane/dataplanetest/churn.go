package dataplanetest

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
)

// ChurnCycles is the number of admit/release cycles of the churn part
// (-short: a tenth).
const ChurnCycles = 3000

// addressHandler is implemented by modes that keep one address handle
// per client address (internal/worker.Pool.AddressHandles).
type addressHandler interface{ AddressHandles() int }

// settle bounds the wait for state a mode frees after a grace period
// (address handles, ahcache.Grace) or its workers' next sweep.
var settle = 10 * time.Second

// testChurn admits and releases clients of two QPs each from thousands
// of distinct addresses, with room for only maxClients at once: every
// release gives its capacity back (a leak refuses an admission within a
// few cycles), and afterwards no session, no per-client state
// (Harness.State) and, once their grace period is over, no address
// handle is left (issue 12: bounded server state under churn, in every
// mode).
func testChurn(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	var before map[string]int
	if h.State != nil {
		before = h.State(in.Mode)
	}
	cycles := ChurnCycles
	if testing.Short() {
		cycles /= 10
	}
	peak := 0
	for i := range cycles {
		a := h.admission(i, 2)
		var g handshake.Grant
		var err error
		// A mode may free a released session's capacity at its workers'
		// next sweep: an admission refused for capacity is retried
		// within settle; a leak keeps refusing.
		for deadline := time.Now().Add(settle); ; {
			if g, err = in.Admit(ctx, a, handshake.SessionRef{}); err == nil {
				break
			}
			if !errors.Is(err, dataplane.ErrNoCapacity) || time.Now().After(deadline) {
				t.Fatalf("cycle %d: Admit = %v (%d sessions)", i, err, in.Stats().Sessions)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if err := in.Release(ctx, ref(g)); err != nil {
			t.Fatalf("cycle %d: Release = %v", i, err)
		}
		if ah, ok := in.Mode.(addressHandler); ok {
			peak = max(peak, ah.AddressHandles())
		}
	}
	in.wantSessions(t, 0, "after the churn")
	deadline := time.Now().Add(settle)
	for {
		var after map[string]int
		if h.State != nil {
			after = h.State(in.Mode)
		}
		ahs := 0
		if ah, ok := in.Mode.(addressHandler); ok {
			ahs = ah.AddressHandles()
		}
		if maps.Equal(before, after) && ahs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after %d admit/release cycles from distinct addresses: %d address handles (want 0), state %v (want %v, as before)",
				settle, cycles, ahs, after, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d cycles: peak %d address handles (those released within the grace period), 0 after it", cycles, peak)
}
