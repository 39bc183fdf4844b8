package ha_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/hatest"
)

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEtcdClientLogsReachSlog: the etcd client a Node makes logs through
// the Node's slog logger (internal/zapslog, as wired in New), in its
// format, with component=etcd. With its only etcd member killed, a
// request's retries make the etcd client warn ("retrying of unary
// invoker failed", with the RPC's method as a zap field); the warning
// must be in the JSON log seqd's logger writes, at WARN, its fields as
// attributes.
func TestEtcdClientLogsReachSlog(t *testing.T) {
	etcd := hatest.Start(t, 1)
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := ha.New(ha.Config{Endpoints: etcd.Endpoints(), Prefix: "/" + t.Name(), Advertise: "127.0.0.1:1", TTL: 2 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.Client().Put(ctx, "/"+t.Name()+"/probe", "1"); err != nil {
		t.Fatal(err)
	}
	etcd.Kill(0)
	fromEtcd := func() []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(buf.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["component"] == "etcd" {
				out = append(out, m)
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := n.Client().Get(rctx, "/"+t.Name()+"/probe")
		rcancel()
		if err == nil {
			t.Fatal("a Get answered with etcd killed")
		}
		for _, m := range fromEtcd() {
			// A warning, its zap fields (the RPC's method) as attributes.
			if _, ok := m["method"]; ok && (m["level"] == "WARN" || m["level"] == "ERROR") {
				t.Logf("etcd client's log line in seqd's log: %v", m)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no etcd client warning in the slog output within 20s; its lines from etcd: %v\nall:\n%s", fromEtcd(), buf.String())
		}
	}
}
