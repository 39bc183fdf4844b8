// Package inprocess runs seqd inside the process that drives it with
// package loadgen (loadgen.Config.InProcess, with SeqdBinary "in-process"
// or no seqd binary found). It is the one part of loadgen that links the
// server (and, through HA, etcd's client): package loadgen takes it as a
// loadgen.Spawner, so that only a program that asks for it pays for it.
// loadgen's tests do; the loadgen command does not (it starts the seqd
// binary beside it, and its TestLinksNoServer keeps it so).
package inprocess

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/seqd/seqd/server"
)

// readyWithin bounds how long a seqd may take to open its admin plane.
const readyWithin = 10 * time.Second

// Spawn starts seqd serving mode on loopback (free ports, metrics off, its
// data in dir, initialised; no receive quota: every client is on loopback,
// one peer), with seqd's -cores and -provider-opts, and returns once its
// admin plane listens: its admin address, and stop, which stops it and
// returns Run's error. It has the type loadgen.Spawner.
func Spawn(_ context.Context, mode, dir, cores, providerOpts string) (string, func() error, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- server.Run(ctx, server.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: dir, Init: true,
			Mode: mode, Cores: cores, ProviderOpts: providerOpts, PeerMaxRecv: -1}, quiet, func(a server.Addrs) { ready <- a })
	}()
	t := time.NewTimer(readyWithin)
	defer t.Stop()
	select {
	case a := <-ready:
		return a.Admin, func() error { cancel(); return <-done }, nil
	case err := <-done:
		cancel()
		return "", nil, fmt.Errorf("in-process seqd (%s): %w", mode, err)
	case <-t.C:
		cancel()
		<-done
		return "", nil, fmt.Errorf("in-process seqd (%s) not ready after %v", mode, readyWithin)
	}
}
