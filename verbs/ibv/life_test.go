package ibv

import (
	"errors"
	"testing"

	"github.com/seqd/seqd/verbs"
)

func TestLife(t *testing.T) {
	var l life
	if err := l.acquire("x"); err != nil {
		t.Fatal(err)
	}
	if err := l.close("x"); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("close with a child: %v, want ErrBusy", err)
	}
	l.release()
	if err := l.close("x"); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := l.close("x"); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("second close: %v, want ErrClosed", err)
	}
	if err := l.acquire("x"); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("acquire after close: %v, want ErrClosed", err)
	}
	if !l.isClosed() {
		t.Fatal("not closed")
	}
}
