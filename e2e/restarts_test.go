package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/spec"
)

// TestKill9RestartsManyClients: four clients under continuous load while
// one seqd process (the real binary, no HA) is killed with -9 and
// restarted on the same data directory and addresses five times, with a
// mode switch before each kill. Over every event one client (a different
// one each time) is held back until the others were served again, so it
// reconnects last with an old session ID the new data path has already
// given to another client. After every event every client is served
// again within a bound, and the verifier checks every value across the
// restarts (issue 12, defect 1). The longest gap per client is logged.
func TestKill9RestartsManyClients(t *testing.T) {
	adminAddr, start := seqdBinary(t)
	srv := start()
	defer func() { srv.Process.Kill(); srv.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 4
	var clients []*client.Client
	for id := range n {
		c, err := client.Dial(ctx, adminAddr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithLogger(quietLogger()),
			client.WithWindow(8), client.WithName(fmt.Sprintf("restarts-%d", id)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	l := StartHeldLoad(ctx, clients)
	defer l.Halt()
	l.EveryoneServed(t, "start", 0, 20, 20*time.Second)
	from := l.Now()
	var worst, worstLast time.Duration
	modes := append(slices.Clone(spec.Modes[1:]), spec.Modes[0]) // every mode, from the second
	for k := range 5 {
		for j, ev := range []string{"switch", "kill"} {
			h := (2*k + j) % n
			what := fmt.Sprintf("%s %d", ev, k+1)
			worstLast = max(worstLast, l.HeldOver(t, h, what, func() {
				at := l.Now()
				if ev == "switch" {
					cc := admintest.Client(ctx, t, adminAddr)
					if _, err := cc.SetMode(ctx, &adminpb.SetModeRequest{Mode: modes[k%len(modes)]}); err != nil {
						t.Fatalf("switch %d: %v", k, err)
					}
				} else {
					srv.Process.Signal(syscall.SIGKILL)
					srv.Wait()
					srv = start()
				}
				worst = max(worst, l.EveryoneServed(t, what, at, 20, 10*time.Second))
			}))
		}
	}
	end := l.Now()
	l.Halt()
	if err := l.V.Check().Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("5 kill -9 restarts and 5 mode switches: verifier %d calls, 0 violations; slowest recovery of every client %v, after the held-back client came back %v",
		l.V.Len(), worst.Round(time.Millisecond), worstLast.Round(time.Millisecond))
	for c := range n {
		gap, gapAt := l.LongestGap(c, from, end)
		t.Logf("RESTARTS client=%d calls=%d reconnects=%d longest_gap=%v at=%v", c, l.Served(c, 0), clients[c].Stats().Reconnects,
			gap.Round(time.Millisecond), gapAt.Round(time.Millisecond))
	}
}
