package zapslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestBridge(t *testing.T) {
	var buf bytes.Buffer
	l := Logger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))).Named("etcd-client")
	l.Debug("hidden")
	l.With(zap.String("endpoint", "http://e:2379")).Warn("retrying", zap.Int("attempt", 3), zap.Error(errors.New("boom")))
	l.Error("failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines (debug filtered), got:\n%s", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"level": "WARN", "msg": "retrying", "logger": "etcd-client", "endpoint": "http://e:2379",
		"attempt": float64(3), "error": "boom"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (line %s)", k, m[k], v, lines[0])
		}
	}
	if !strings.Contains(lines[1], `"level":"ERROR"`) {
		t.Errorf("error line: %s", lines[1])
	}
}
