package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
)

func TestErrTimeoutIsDeadlineExceeded(t *testing.T) {
	err := fmt.Errorf("%w: no answer before the deadline", ErrTimeout)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: errors.Is ErrTimeout %v, DeadlineExceeded %v", err, errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded))
	}
	if errors.Is(err, context.Canceled) || errors.Is(ctxError(context.Canceled), ErrTimeout) {
		t.Error("a canceled call is no timeout")
	}
	if e := ctxError(context.DeadlineExceeded); !errors.Is(e, ErrTimeout) || !errors.Is(e, context.DeadlineExceeded) {
		t.Errorf("ctxError(DeadlineExceeded) = %v", e)
	}
}

// Each sentinel reaches the caller wrapped, and errors.Is finds it.
func TestSentinelErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("ErrConfig", func(t *testing.T) {
		_, err := Dial(ctx, "127.0.0.1:7070", WithQPs(1000))
		if !errors.Is(err, ErrConfig) || err == ErrConfig {
			t.Fatalf("Dial with 1000 QPs = %v, want a wrapped ErrConfig", err)
		}
	})
	t.Run("ErrUnavailable", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// Port 1 on loopback: nothing listens there.
		_, err := Dial(dctx, "127.0.0.1:1")
		if !errors.Is(err, ErrUnavailable) || err == ErrUnavailable {
			t.Fatalf("Dial to a closed port = %v, want a wrapped ErrUnavailable", err)
		}
	})
	t.Run("ErrNotConnected", func(t *testing.T) {
		a := startServer(t, server.Config{})
		c := dialT(t, a.Admin)
		c.Close()
		_, err := c.GetTimestamp(ctx)
		if !errors.Is(err, ErrNotConnected) || err == ErrNotConnected {
			t.Fatalf("GetTimestamp after Close = %v, want a wrapped ErrNotConnected", err)
		}
	})
	t.Run("ErrTimeout", func(t *testing.T) {
		a, stop := startStoppable(t, server.Config{})
		c := dialT(t, a.Admin)
		stop()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := c.GetTimestamp(cctx)
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("GetTimestamp with the server gone = %v, want ErrTimeout and DeadlineExceeded", err)
		}
		dst := make([]Timestamp, 3)
		cctx2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel2()
		if err := c.GetTimestamps(cctx2, dst); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("GetTimestamps with the server gone = %v, want ErrTimeout and DeadlineExceeded", err)
		}
	})
	t.Run("ErrRegression", func(t *testing.T) {
		// A counter-format seqd restarted on a fresh data directory starts
		// again from the bottom: its answers would go backwards.
		dir := t.TempDir()
		a, stop := startStoppable(t, server.Config{Format: "counter", Data: dir})
		c := dialT(t, a.Admin)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for range 100 {
			if _, err := c.GetTimestamp(cctx); err != nil {
				t.Fatal(err)
			}
		}
		stop()
		startServer(t, server.Config{Format: "counter", Data: t.TempDir(), Admin: a.Admin})
		_, err := c.GetTimestamp(cctx)
		if !errors.Is(err, ErrRegression) || err == ErrRegression {
			t.Fatalf("GetTimestamp from a server gone backwards = %v, want a wrapped ErrRegression", err)
		}
		if c.Stats().Regressions == 0 {
			t.Error("Stats.Regressions = 0")
		}
	})
}

// A call waits until its context's deadline, past WithTimeout: the server
// is down for longer than WithTimeout and the call still gets its answer
// once it is back.
func TestContextDeadlineOutlivesTimeout(t *testing.T) {
	dir := t.TempDir()
	a, stop := startStoppable(t, server.Config{Data: dir})
	c := dialT(t, a.Admin, WithTimeout(100*time.Millisecond))
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.GetTimestamp(ctx)
		res <- err
	}()
	// The outage outlasts WithTimeout's 100ms several times over.
	select {
	case err := <-res:
		t.Fatalf("the call returned %v after %v, before the server was back", err, time.Since(start))
	case <-time.After(500 * time.Millisecond):
	}
	startServer(t, server.Config{Data: dir, Admin: a.Admin})
	if err := <-res; err != nil {
		t.Fatalf("GetTimestamp with a 20s context across a 500ms outage (WithTimeout 100ms): %v", err)
	}
}
