package dataplanetest

import (
	"context"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
)

// testHostile: admissions a hostile or broken client might send are
// refused with an error of a kind, or cut down to the configured
// bounds: a window beyond MaxWindow (or negative), ten thousand QPs in
// one session, one QP named twice. Nothing panics, and every session
// granted is released.
func testHostile(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	var granted []handshake.Grant
	for _, w := range []int{1 << 30, -5} {
		a := h.admission(len(granted)+1, 1)
		a.Window = w
		g, err := in.Admit(ctx, a, handshake.SessionRef{})
		if err != nil {
			if kindOf(err) == nil {
				t.Errorf("Admit with window %d = %v: no error kind", w, err)
			}
			continue
		}
		granted = append(granted, g)
		if g.Window < 0 || g.Window > maxWindow {
			t.Errorf("Admit with window %d granted window %d, beyond MaxWindow %d", w, g.Window, maxWindow)
		}
	}

	many := h.admission(100, 10000)
	if g, err := in.Admit(ctx, many, handshake.SessionRef{}); err == nil {
		granted = append(granted, g)
		t.Errorf("an admission of %d QPs was granted (MaxClients %d, MaxWindow %d)", len(many.QPs), maxClients, maxWindow)
	} else if k := kindOf(err); k != dataplane.ErrNoCapacity && k != dataplane.ErrInvalidArgument {
		t.Errorf("Admit of %d QPs = %v: kind %v, want %q or %q", len(many.QPs), err, k, dataplane.ErrNoCapacity, dataplane.ErrInvalidArgument)
	}

	twice := h.admission(101, 1)
	twice.QPs = append(twice.QPs, twice.QPs...)
	twice.ConnQPs = append(twice.ConnQPs, twice.ConnQPs...)
	if g, err := in.Admit(ctx, twice, handshake.SessionRef{}); err == nil {
		granted = append(granted, g)
		t.Errorf("an admission naming one QP twice was granted")
	} else if k := kindOf(err); k != dataplane.ErrInvalidArgument && k != dataplane.ErrFailedPrecondition {
		t.Errorf("Admit of one QP twice = %v: kind %v, want %q or %q", err, k, dataplane.ErrInvalidArgument, dataplane.ErrFailedPrecondition)
	}

	in.wantSessions(t, len(granted), "after the hostile admissions")
	for _, g := range granted {
		if err := in.Release(ctx, ref(g)); err != nil {
			t.Errorf("Release = %v", err)
		}
	}
	in.wantSessions(t, 0, "after releasing them")
}
