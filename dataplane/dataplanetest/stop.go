package dataplanetest

import (
	"context"
	"sync"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
)

// testStopTwice: Stop, Stop, Close, Close all succeed, and the second
// Stop reports the same high as the first (the mode hands out nothing
// in between).
func testStopTwice(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	h1, err := in.Stop()
	if err != nil {
		t.Fatalf("Stop = %v", err)
	}
	h2, err := in.Stop()
	if err != nil {
		t.Fatalf("a second Stop = %v", err)
	}
	if h2 != h1 {
		t.Errorf("a second Stop reported high %d, the first %d", h2, h1)
	}
	in.Stats() // still answers
	for i := range 2 {
		if err := in.Close(); err != nil {
			t.Fatalf("Close %d after Stop = %v", i+1, err)
		}
	}
	if _, err := in.Stop(); err != nil {
		t.Fatalf("Stop after Close = %v", err)
	}
}

// testCloseBeforeStop: Close without Stop stops the mode too; Stop and
// Close after it do nothing and fail nothing.
func testCloseBeforeStop(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	if err := in.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := in.Stop(); err != nil {
		t.Fatalf("Stop after Close = %v", err)
	}
	if err := in.Close(); err != nil {
		t.Fatalf("a second Close = %v", err)
	}
	_, err := in.Admit(context.Background(), h.admission(2, 1), handshake.SessionRef{})
	wantKind(t, "Admit after Close", err, dataplane.ErrUnavailable)
}

// testStopConcurrent: Stop and Close called at once from several
// goroutines, with admissions and releases racing them, return (the
// race detector checks the rest).
func testStopConcurrent(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(3)
		go func() {
			defer wg.Done()
			if g, err := in.Admit(ctx, h.admission(10+i, 1), handshake.SessionRef{}); err == nil {
				in.Release(ctx, ref(g))
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := in.Stop(); err != nil {
				t.Errorf("concurrent Stop = %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := in.Close(); err != nil {
				t.Errorf("concurrent Close = %v", err)
			}
		}()
	}
	wg.Wait()
}

// testNoAdmitAfterStop: after Stop nothing is admitted (ErrUnavailable:
// the client looks the mode up again), and sessions admitted before are
// still released without error or are unknown.
func testNoAdmitAfterStop(t testing.TB, h *Harness) {
	in := h.start(t, nil, nil)
	ctx := context.Background()
	g := in.admit(t, h.admission(1, 1), handshake.SessionRef{})
	if _, err := in.Stop(); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	_, err := in.Admit(ctx, h.admission(2, 1), handshake.SessionRef{})
	wantKind(t, "Admit after Stop", err, dataplane.ErrUnavailable)
	_, err = in.Admit(ctx, h.admission(2, 1), ref(g))
	wantKind(t, "a replacing Admit after Stop", err, dataplane.ErrUnavailable)
	if err := in.Release(ctx, ref(g)); err != nil {
		if k := kindOf(err); k != dataplane.ErrUnknownSession && k != dataplane.ErrUnavailable {
			t.Errorf("Release after Stop = %v: kind %v, want none, %q or %q", err, k, dataplane.ErrUnknownSession, dataplane.ErrUnavailable)
		}
	}
}
