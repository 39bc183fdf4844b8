package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/server"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestOneLinePerEvent is issue 29 item 3: every connect, disconnect and
// mode switch was logged twice at info (the data path's line and the admin
// plane's), a mode switch three times with the audit line. Now each is one
// info line (the audit line of a mutating call is apart: it says who),
// and a failed call one warning (it was two: the handler's and the
// audit's).
func TestOneLinePerEvent(t *testing.T) {
	var logs syncBuf
	served := make(chan server.Addrs, 1)
	var stop func()
	defer func(f func(server.Addrs, func())) { onServing = f }(onServing)
	onServing = func(a server.Addrs, s func()) { stop = s; served <- a }
	done := make(chan int, 1)
	go func() {
		done <- realMainEnv([]string{"-data", t.TempDir(), "-init", "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0", "-metrics", "off"}, &logs, nil)
	}()
	var a server.Addrs
	select {
	case a = <-served:
	case code := <-done:
		t.Fatalf("seqd exited %d: %s", code, logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func() {
		c, err := client.Dial(ctx, a.Admin)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetTimestamp(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	get()
	cc, err := adminclient.Dial(ctx, a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: "herd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: "bogus"}); err == nil {
		t.Fatal("set-mode bogus succeeded")
	}
	cc.Close()
	get()
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("seqd exited %d", code)
	}
	out := logs.String()
	for _, c := range []struct {
		re   string
		want int
	}{
		{`level=INFO msg="(client connected|[a-z0-9-]+ client admitted)"`, 2},
		{`level=INFO msg="(client disconnected|[a-z0-9-]+ client released)"`, 2},
		{`level=INFO msg="mode switched"`, 1},
		{`level=INFO msg="admin call" .*SetMode`, 1},
		// A failed call: one warning, the audit line, with the error.
		{`level=WARN msg="(set-mode failed|admin call)"`, 1},
		{`level=WARN msg="admin call" .*SetMode .*code=\w+ .*err=`, 1},
	} {
		if n := len(regexp.MustCompile(c.re).FindAllString(out, -1)); n != c.want {
			t.Errorf("%d lines match %s, want %d:\n%s", n, c.re, c.want, out)
		}
	}
}

// TestErrorsOnce is issue 29 item 3: seqd's errors doubled their
// prefixes ("seqd: seqd: oracle in DIR: oracle: loading mark: oracle: no
// mark file") and named Go fields (Config.Init, Config.Floor) instead of
// the flags.
func TestErrorsOnce(t *testing.T) {
	var out syncBuf
	code := realMainEnv([]string{"-data", t.TempDir(), "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0", "-metrics", "off", "-log-level", "error"}, &out, nil)
	msg := out.String()
	if code != 1 || !strings.HasPrefix(msg, "seqd: ") || !strings.Contains(msg, "no mark file") {
		t.Fatalf("exit %d: %q", code, msg)
	}
	for _, bad := range []string{"seqd: seqd:", "Config.", "oracle: loading", ": oracle:"} {
		if strings.Contains(msg, bad) {
			t.Errorf("%q in %q", bad, msg)
		}
	}
	for _, want := range []string{"-advance", "-init"} {
		if !strings.Contains(msg, want) {
			t.Errorf("no %s in %q", want, msg)
		}
	}
}
