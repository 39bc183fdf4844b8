package pdfront

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/pdpb"
)

type failingSource struct{}

func (failingSource) Reserve(context.Context, int) (uint64, error) {
	return 0, errors.New("seqd unavailable")
}

type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *lines) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestWarningsRateLimited is issue 29 item 3: with seqd away seqd-pd
// logged a WARN for every Tso request (8,442 lines, 1.4 MB, in 5 s). One
// line per WarnEvery now, and the next says how many it suppressed.
func TestWarningsRateLimited(t *testing.T) {
	var out lines
	s, err := New(Config{ClusterID: 1, URL: "http://x", Logger: slog.New(slog.NewTextHandler(&out, nil))}, failingSource{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.warns.SetClock(func() time.Time { return now })
	req := &pdpb.TsoRequest{Header: &pdpb.RequestHeader{ClusterId: 1}, Count: 1}
	for range 1000 {
		if _, err := s.tso(context.Background(), req); err == nil {
			t.Fatal("a failing source answered")
		}
	}
	if n := strings.Count(out.String(), "reservation failed"); n != 1 {
		t.Fatalf("%d warnings for 1000 failures within %v, want 1:\n%.500s", n, WarnEvery, out.String())
	}
	now = now.Add(WarnEvery)
	s.tso(context.Background(), req)
	if got := out.String(); strings.Count(got, "reservation failed") != 2 || !strings.Contains(got, "suppressed=999") {
		t.Fatalf("after %v: %s", WarnEvery, got)
	}
}
