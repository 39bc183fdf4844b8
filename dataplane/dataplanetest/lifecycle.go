package dataplanetest

import (
	"context"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
)

// testAdmitRelease: a grant names a fresh, non-zero session of the
// mode's epoch; Release ends it once, and a second Release, or one of
// session 0, names no session.
func testAdmitRelease(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	a := in.admit(t, h.admission(1, 2), handshake.SessionRef{})
	b := in.admit(t, h.admission(2, 1), handshake.SessionRef{})
	for _, g := range []handshake.Grant{a, b} {
		if g.Session == 0 {
			t.Errorf("grant %+v: session 0", g)
		}
		if g.Epoch != in.cfg.Epoch {
			t.Errorf("grant of session %d: epoch %d, want the mode's, %d", g.Session, g.Epoch, in.cfg.Epoch)
		}
	}
	if a.Session == b.Session {
		t.Fatalf("two admissions granted the same session %d", a.Session)
	}
	in.wantSessions(t, 2, "after two admissions")
	if err := in.Release(ctx, ref(a)); err != nil {
		t.Fatalf("Release(%+v) = %v", ref(a), err)
	}
	in.wantSessions(t, 1, "after one release")
	wantKind(t, "a second Release of the same session", in.Release(ctx, ref(a)), dataplane.ErrUnknownSession)
	wantKind(t, "Release of session 0", in.Release(ctx, handshake.SessionRef{Epoch: in.cfg.Epoch}), dataplane.ErrUnknownSession)
	wantKind(t, "Release of a session never granted", in.Release(ctx, handshake.SessionRef{ID: a.Session + b.Session + 1000, Epoch: in.cfg.Epoch}),
		dataplane.ErrUnknownSession)
	if err := in.Release(ctx, ref(b)); err != nil {
		t.Fatalf("Release(%+v) = %v", ref(b), err)
	}
	in.wantSessions(t, 0, "after both releases")
}

// testReleaseOtherEpoch: the mode checks the epoch. A ref of the right
// ID but another epoch (a session of an earlier start of the mode, whose
// IDs the new start hands out again) names no session and releases
// nothing.
func testReleaseOtherEpoch(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	g := in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	for _, e := range []uint64{0, g.Epoch - 1, g.Epoch + 1} {
		wantKind(t, "Release of the session under epoch "+itoa(e), in.Release(ctx, handshake.SessionRef{ID: g.Session, Epoch: e}),
			dataplane.ErrUnknownSession)
	}
	in.wantSessions(t, 1, "after releases under other epochs")
	if err := in.Release(ctx, ref(g)); err != nil {
		t.Fatalf("Release under the grant's epoch = %v", err)
	}
}

// testReplace: an admission that replaces a session may take over its
// QPs (a client reconnecting from the same QPs); the old session is gone
// in the same step.
func testReplace(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	old := in.admit(t, h.admission(1, 2), handshake.SessionRef{})
	g := in.admit(t, h.admission(1, 2), ref(old))
	if g.Session == old.Session {
		t.Fatalf("the replacing session has the old one's ID %d", g.Session)
	}
	in.wantSessions(t, 1, "after a replacing admission")
	wantKind(t, "Release of the replaced session", in.Release(ctx, ref(old)), dataplane.ErrUnknownSession)
	if err := in.Release(ctx, ref(g)); err != nil {
		t.Fatalf("Release of the replacing session = %v", err)
	}
	in.wantSessions(t, 0, "after releasing the replacing session")
}

// testReplaceOtherEpoch: a replaced ref of another epoch names no
// session of this start, so the session of that ID is kept.
func testReplaceOtherEpoch(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	a := in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	b := in.admit(t, h.admission(2, 1), handshake.SessionRef{ID: a.Session, Epoch: a.Epoch + 1})
	in.wantSessions(t, 2, "after an admission replacing a session of another epoch")
	if err := in.Release(ctx, ref(a)); err != nil {
		t.Errorf("Release of the session a ref of another epoch named = %v; it must be kept", err)
	}
	if err := in.Release(ctx, ref(b)); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// testReplaceRefused: when the replacing admission is refused, for a
// malformed request or for a QP another session holds, the old session
// is kept.
func testReplaceRefused(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	old := in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	other := in.admit(t, h.admission(2, 1), handshake.SessionRef{})
	bad := h.admission(1, 1)
	bad.QPs, bad.ConnQPs = nil, nil
	if _, err := in.Admit(ctx, bad, ref(old)); err == nil {
		t.Fatalf("an admission without QPs replacing session %d was granted", old.Session)
	}
	in.wantSessions(t, 2, "after a refused replacing admission (no QPs)")
	if _, err := in.Admit(ctx, h.admission(2, 1), ref(old)); err == nil {
		t.Fatalf("an admission of session %d's QPs replacing session %d was granted", other.Session, old.Session)
	}
	in.wantSessions(t, 2, "after a refused replacing admission (QPs of another session)")
	for _, g := range []handshake.Grant{old, other} {
		if err := in.Release(ctx, ref(g)); err != nil {
			t.Fatalf("Release of session %d = %v; a refused replacing admission must keep it", g.Session, err)
		}
	}
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; v > 0; v /= 10 {
		i--
		b[i] = byte('0' + v%10)
	}
	return string(b[i:])
}
