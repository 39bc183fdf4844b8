package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/internal/testbin"
	"github.com/seqd/seqd/loadgen/verify"
)

func freePort(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitServing polls the admin server's health service until it reports
// SERVING or the deadline passes.
func waitServing(ctx context.Context, addr string) error {
	var last error
	for ctx.Err() == nil {
		cc, err := adminclient.Dial(ctx, addr)
		if err == nil {
			resp, err := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
			cc.Close()
			if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
				return nil
			}
			last = fmt.Errorf("health: %v %v", resp.GetStatus(), err)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("not serving: %v (last: %v)", ctx.Err(), last)
}

func TestHealthServing(t *testing.T) {
	addr := startServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitServing(ctx, addr); err != nil {
		t.Fatal(err)
	}
}

func TestKill9Restart(t *testing.T) {
	adminAddr, start := seqdBinary(t)
	srv := start()
	defer func() { srv.Process.Kill(); srv.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, adminAddr, client.WithLogger(quietLogger()), client.WithWindow(16))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	origin := time.Now()
	var v verify.History
	var mu sync.Mutex
	var maxBefore uint64
	var killedAt, restartedAt time.Duration = -1, -1
	var after int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := time.Since(origin)
				cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
				ts, err := c.GetTimestamp(cctx)
				ccancel()
				e := time.Since(origin)
				if err != nil {
					if !errors.Is(err, client.ErrTimeout) && !errors.Is(err, client.ErrUnavailable) {
						t.Errorf("GetTimestamp: %v", err)
						return
					}
					continue
				}
				v.Record(g, verify.Call{Start: s, End: e, Value: uint64(ts)})
				mu.Lock()
				switch {
				case killedAt < 0:
					maxBefore = max(maxBefore, uint64(ts))
				case restartedAt >= 0 && s > restartedAt:
					if uint64(ts) <= maxBefore {
						t.Errorf("after restart got %d <= %d served before the kill", ts, maxBefore)
					}
					after++
				}
				mu.Unlock()
			}
		}()
	}
	waitCalls := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for v.Len() < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // polling a counter with a deadline
		}
	}
	waitCalls(2000)
	mu.Lock()
	killedAt = time.Since(origin)
	mu.Unlock()
	if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	srv = start()
	mu.Lock()
	restartedAt = time.Since(origin)
	mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := after
		mu.Unlock()
		if n >= 2000 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if after < 2000 {
		t.Fatalf("only %d calls succeeded after the restart (stats %+v)", after, c.Stats())
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls, max before kill %d, %d after restart; client %+v", v.Len(), maxBefore, after, c.Stats())
}

// seqdBinary builds cmd/seqd and returns its admin address and a function
// that starts it on one data directory and fixed ports, waiting until it
// serves: only the first start passes -init (a new deployment); a restart
// must find the mark the first one left. It skips under -short or without
// the go tool.
func seqdBinary(t *testing.T) (string, func() *exec.Cmd) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the seqd binary")
	}
	bin := testbin.Seqd(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	adminAddr, dev := freePort(t, "tcp"), freePort(t, "udp")
	starts := 0
	return adminAddr, func() *exec.Cmd {
		args := []string{"-data", data, "-admin", adminAddr, "-device", dev, "-metrics", "off"}
		if starts++; starts == 1 {
			args = append(args, "-init") // only the first start is a new deployment
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := waitServing(ctx, adminAddr); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
		return cmd
	}
}
