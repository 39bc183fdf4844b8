package e2e

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	_ "github.com/seqd/seqd/verbs/soft"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startServer runs seqd in-process on ephemeral ports and returns its
// admin address. It stops when the test ends.
func startServer(t testing.TB, provOpts string) string {
	t.Helper()
	return startConfig(t, server.Config{ProviderOpts: provOpts, Workers: 2, MaxWindow: 512})
}

func runLoad(t *testing.T, provOpts string, callers, perCaller int) {
	adminAddr := startServer(t, provOpts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var clients []*client.Client
	for i := range 2 {
		c, err := client.Dial(ctx, adminAddr, client.WithDevice("soft", "127.0.0.1:0", provOpts),
			client.WithQPs(2), client.WithWindow(32), client.WithName("e2e"), client.WithLogger(quietLogger()),
			client.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	origin := time.Now()
	var v verify.History
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for range perCaller {
				start := time.Since(origin)
				ts, err := c.GetTimestamp(ctx)
				end := time.Since(origin)
				if err != nil {
					errs <- err
					return
				}
				v.Record(g, verify.Call{Start: start, End: end, Value: uint64(ts)})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("GetTimestamp: %v", err)
	}
	if v.Len() != callers*perCaller {
		t.Fatalf("%d calls recorded, want %d", v.Len(), callers*perCaller)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		t.Logf("client %d: %+v", i, c.Stats())
		if s := c.Stats(); s.Regressions != 0 {
			t.Errorf("client %d saw %d regressions", i, s.Regressions)
		}
	}
}

func TestInProcessClean(t *testing.T) { runLoad(t, "", 8, 2000) }

func TestInProcessFaults(t *testing.T) {
	runLoad(t, "loss=0.05,dup=0.05,reorder=0.05", 8, 1000)
}
