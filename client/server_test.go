package client

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
)

// startServer runs seqd in-process with cfg (ephemeral loopback ports
// and -init unless cfg says otherwise) until the test ends, and returns its
// addresses.
func startServer(t testing.TB, cfg server.Config) server.Addrs {
	t.Helper()
	a, _ := startStoppable(t, cfg)
	return a
}

// startStoppable is startServer that also returns a stop function (the
// test's end calls it too; calling it twice is fine).
func startStoppable(t testing.TB, cfg server.Config) (server.Addrs, func()) {
	t.Helper()
	if cfg.Device == "" {
		cfg.Device = "127.0.0.1:0"
	}
	if cfg.Admin == "" {
		cfg.Admin = "127.0.0.1:0"
	}
	if cfg.Data == "" {
		cfg.Data = t.TempDir()
	}
	cfg.Metrics = "off"
	// A fresh data directory is a new deployment; a restart on the same
	// one loads its mark file whatever Init says.
	cfg.Init = true
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() { done <- server.Run(ctx, cfg, quiet, func(a server.Addrs) { ready <- a }) }()
	select {
	case a := <-ready:
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return a, stop
	case err := <-done:
		cancel()
		t.Fatalf("seqd: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("seqd did not start in 30s")
	}
	return server.Addrs{}, nil
}

// dialT dials addr with opts, bounded by 10s, and closes the client when
// the test ends.
func dialT(t testing.TB, addr string, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	c, err := Dial(ctx, addr, append([]Option{quiet}, opts...)...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
