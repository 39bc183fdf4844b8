package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
)

func TestWindow(t *testing.T) {
	for _, c := range []struct{ asked, def, most, want int }{
		{0, 16, 64, 16}, {-3, 16, 64, 16}, {0, 16, 8, 8}, {5, 16, 64, 5}, {100, 16, 64, 64},
	} {
		if got := Window(c.asked, c.def, c.most); got != c.want {
			t.Errorf("Window(%d, %d, %d) = %d, want %d", c.asked, c.def, c.most, got, c.want)
		}
	}
}

func TestCheckQPs(t *testing.T) {
	if err := CheckQPs(nil); !errors.Is(err, dataplane.ErrInvalidArgument) {
		t.Errorf("no QPs: %v", err)
	}
	if err := CheckQPs([]handshake.Endpoint{{QPN: 1}, {QPN: 1 << 24}}); !errors.Is(err, dataplane.ErrInvalidArgument) {
		t.Errorf("QPN of 25 bits: %v", err)
	}
	if err := CheckQPs([]handshake.Endpoint{{QPN: 1<<24 - 1}}); err != nil {
		t.Errorf("QPN of 24 bits: %v", err)
	}
}

func TestLookupReplaced(t *testing.T) {
	m := map[uint64]string{1: "a"}
	if s, err := Lookup(m, handshake.SessionRef{ID: 1, Epoch: 7}, 7, "x session"); err != nil || s != "a" {
		t.Errorf("Lookup of a session held: %q, %v", s, err)
	}
	for _, ref := range []handshake.SessionRef{{ID: 1, Epoch: 8}, {ID: 2, Epoch: 7}} {
		if _, err := Lookup(m, ref, 7, "x session"); !errors.Is(err, dataplane.ErrUnknownSession) {
			t.Errorf("Lookup(%+v): %v", ref, err)
		}
		if _, ok := Replaced(m, ref, 7); ok {
			t.Errorf("Replaced(%+v) found a session", ref)
		}
	}
	if s, ok := Replaced(m, handshake.SessionRef{ID: 1, Epoch: 7}, 7); !ok || s != "a" {
		t.Errorf("Replaced of a session held: %q, %v", s, ok)
	}
}

// TestSessionWindow: one session's QPs × window stays within its cap
// (issue 26, item 4): the window shrinks to fit; more QPs than the cap
// are refused with ErrNoCapacity naming the flag.
func TestSessionWindow(t *testing.T) {
	for _, c := range []struct{ asked, def, most, qps, limit, want int }{
		{256, 16, 256, 16, 8192, 256}, // 4096: within
		{256, 16, 256, 16, 2048, 128}, // 4096 > 2048: 2048/16
		{0, 64, 1024, 16, 1000, 62},   // the default window shrinks too
		{256, 16, 256, 16, 0, 256},    // no cap
		{5, 16, 256, 3, 16, 5},
	} {
		got, err := SessionWindow(c.asked, c.def, c.most, c.qps, c.limit)
		if err != nil || got != c.want {
			t.Errorf("SessionWindow(%d, %d, %d, %d QPs, cap %d) = %d, %v, want %d", c.asked, c.def, c.most, c.qps, c.limit, got, err, c.want)
		}
		if c.limit > 0 && got*c.qps > c.limit {
			t.Errorf("cap %d: %d QPs × window %d", c.limit, c.qps, got)
		}
	}
	_, err := SessionWindow(1, 16, 256, 17, 16)
	if !errors.Is(err, dataplane.ErrNoCapacity) || !strings.Contains(err.Error(), "-max-session-recv") {
		t.Errorf("17 QPs over a cap of 16: %v, want ErrNoCapacity naming -max-session-recv", err)
	}
	for _, c := range []struct{ set, budget, want int }{{0, 32768, 8192}, {1000, 32768, 1000}, {-1, 32768, 0}, {0, 2, 1}} {
		cfg := Config{MaxSessionRecv: c.set}
		if got := cfg.SessionCap(c.budget); got != c.want {
			t.Errorf("SessionCap(MaxSessionRecv %d, budget %d) = %d, want %d", c.set, c.budget, got, c.want)
		}
	}
}
