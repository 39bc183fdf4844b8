package worker

import (
	"errors"
	"testing"

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
	if err := CheckQPs([]dataplane.Endpoint{{QPN: 1}, {QPN: 1 << 24}}); !errors.Is(err, dataplane.ErrInvalidArgument) {
		t.Errorf("QPN of 25 bits: %v", err)
	}
	if err := CheckQPs([]dataplane.Endpoint{{QPN: 1<<24 - 1}}); err != nil {
		t.Errorf("QPN of 24 bits: %v", err)
	}
}

func TestLookupReplaced(t *testing.T) {
	m := map[uint64]string{1: "a"}
	if s, err := Lookup(m, dataplane.SessionRef{ID: 1, Epoch: 7}, 7, "x session"); err != nil || s != "a" {
		t.Errorf("Lookup of a session held: %q, %v", s, err)
	}
	for _, ref := range []dataplane.SessionRef{{ID: 1, Epoch: 8}, {ID: 2, Epoch: 7}} {
		if _, err := Lookup(m, ref, 7, "x session"); !errors.Is(err, dataplane.ErrUnknownSession) {
			t.Errorf("Lookup(%+v): %v", ref, err)
		}
		if _, ok := Replaced(m, ref, 7); ok {
			t.Errorf("Replaced(%+v) found a session", ref)
		}
	}
	if s, ok := Replaced(m, dataplane.SessionRef{ID: 1, Epoch: 7}, 7); !ok || s != "a" {
		t.Errorf("Replaced of a session held: %q, %v", s, ok)
	}
}
