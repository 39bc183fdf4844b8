package lograte

import (
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	l := New(10 * time.Second)
	now := time.Unix(1000, 0)
	l.SetClock(func() time.Time { return now })
	if ok, n := l.Allow("a"); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for i := 0; i < 99; i++ {
		if ok, _ := l.Allow("a"); ok {
			t.Fatalf("line %d let through within the interval", i+2)
		}
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key is limited apart")
	}
	now = now.Add(10 * time.Second)
	if ok, n := l.Allow("a"); !ok || n != 99 {
		t.Fatalf("after the interval: %v, suppressed %d, want 99", ok, n)
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("the interval restarts")
	}
}
