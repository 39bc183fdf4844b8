package client

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
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

// TestSilentWithoutLogger is issue 29 item 3: the client library logged
// through slog.Default(), so an application's own log got the library's
// lines uninvited. Without WithLogger it logs nothing; with it, there.
func TestSilentWithoutLogger(t *testing.T) {
	a := startServer(t, server.Config{})
	var def, mine lockedBuffer
	old := slog.Default()
	defer slog.SetDefault(old)
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, opts := range [][]Option{nil, {WithLogger(slog.New(slog.NewTextHandler(&mine, &slog.HandlerOptions{Level: slog.LevelDebug})))}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, a.Admin, opts...)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetTimestamp(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if def.String() != "" {
		t.Errorf("a client without WithLogger wrote to slog.Default():\n%s", def.String())
	}
	if mine.String() == "" {
		t.Errorf("a client WithLogger(debug) logged nothing")
	}
}
