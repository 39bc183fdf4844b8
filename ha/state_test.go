package ha

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seqd/seqd/ha/hatest"
)

// TestStateFenced: the group's state is written only under the term's
// election key; a deposed term's write is refused, ends the term, and
// leaves the state as the later term wrote it.
func TestStateFenced(t *testing.T) {
	c := hatest.Start(t, 1)
	n, err := New(Config{Endpoints: c.Endpoints(), Prefix: "/state", Advertise: "a", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	term := func(key string) *Term {
		put, err := n.cli.Put(ctx, key, "a")
		if err != nil {
			t.Fatal(err)
		}
		l := &lease{base: time.Now(), gone: make(chan struct{})}
		l.extend(time.Hour)
		tm := newTerm(n, key, put.Header.Revision, l)
		if tm.serve != nil {
			tm.serve.extend(time.Hour) // as if a heartbeat had been answered
		}
		return tm
	}
	const key = "/state/election/a"
	old := term(key)
	if _, ok, err := old.LoadState(ctx, "mode"); ok || err != nil {
		t.Fatalf("LoadState of a new group = %v, %v; want none", ok, err)
	}
	if err := old.SaveState(ctx, "mode", "herd"); err != nil {
		t.Fatalf("SaveState: %v", err)
	}
	// A later term: the old one's election key is gone.
	if _, err := n.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	later := term(key)
	if v, ok, err := later.LoadState(ctx, "mode"); v != "herd" || !ok || err != nil {
		t.Fatalf("the later term loads %q, %v, %v; want herd", v, ok, err)
	}
	if err := later.SaveState(ctx, "mode", "fasst"); err != nil {
		t.Fatalf("later SaveState: %v", err)
	}
	if err := old.SaveState(ctx, "mode", "darpc"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed SaveState = %v; want ErrNotLeader", err)
	}
	select {
	case <-old.lost:
	default:
		t.Fatal("a refused SaveState did not end the deposed term")
	}
	if v, _, _ := later.LoadState(ctx, "mode"); v != "fasst" {
		t.Fatalf("stored mode %q after the deposed write; want fasst", v)
	}
}
