package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/server"
	_ "github.com/seqd/seqd/verbs/soft"
)

// startSeqd runs a seqd server in-process on ephemeral ports.
func startSeqd(dir string) (adminAddr string, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() {
		done <- server.Run(ctx, server.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: dir, Init: true},
			quiet, func(a server.Addrs) { ready <- a })
	}()
	select {
	case a := <-ready:
		return a.Admin, func() { cancel(); <-done }
	case err := <-done:
		panic(err)
	}
}

func Example() {
	dir, _ := os.MkdirTemp("", "seqd-example")
	defer os.RemoveAll(dir)
	addr, stop := startSeqd(dir)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	a, err := c.GetTimestamp(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := c.GetTimestamp(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("increasing:", a < b)
	fmt.Println("recent:", time.Since(b.Physical()) < time.Minute)
	// Output:
	// increasing: true
	// recent: true
}
