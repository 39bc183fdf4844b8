package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
	var v Verifier
	var mu sync.Mutex
	ends := make([][]time.Duration, n)
	resets := make([][]time.Duration, n)
	var hold, busy [n]atomic.Bool
	origin := time.Now()
	now := func() time.Duration { return time.Since(origin) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var clients []*client.Client
	for id := range n {
		c, err := client.Dial(ctx, adminAddr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithLogger(quietLogger()),
			client.WithWindow(8), client.WithName(fmt.Sprintf("restarts-%d", id)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if hold[id].Load() {
					time.Sleep(time.Millisecond) // held back by the test
					continue
				}
				busy[id].Store(true)
				s := now()
				cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
				ts, err := c.GetTimestamp(cctx)
				ccancel()
				e := now()
				busy[id].Store(false)
				if err == nil {
					v.Record(Call{Caller: id, Start: s, End: e, Value: uint64(ts)})
					mu.Lock()
					ends[id] = append(ends[id], e)
					mu.Unlock()
					time.Sleep(200 * time.Microsecond)
				}
			}
		}()
	}
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer halt()
	served := func(c int, after time.Duration) int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, e := range ends[c] {
			if e > after {
				k++
			}
		}
		return k
	}
	everyoneServed := func(what string, at time.Duration, within time.Duration) time.Duration {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			ok := true
			var got []int
			for c := range n {
				got = append(got, served(c, at))
				if got[c] < 20 && !hold[c].Load() {
					ok = false
				}
			}
			if ok {
				return now() - at
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: clients served %v times within %v of it, want 20 each", what, got, within)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	everyoneServed("start", 0, 20*time.Second)
	from := now()
	var worst, worstLast time.Duration
	modes := []string{spec.ModeHERD, spec.ModeSpecS0, spec.ModeAtomics}
	for k := range 5 {
		for j, ev := range []string{"switch", "kill"} {
			h := (2*k + j) % n
			hold[h].Store(true)
			for busy[h].Load() {
				time.Sleep(time.Millisecond)
			}
			at := now()
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
			what := fmt.Sprintf("%s %d", ev, k+1)
			worst = max(worst, everyoneServed(what, at, 10*time.Second))
			mu.Lock()
			resets[h] = append(resets[h], now())
			mu.Unlock()
			at = now()
			hold[h].Store(false)
			worstLast = max(worstLast, everyoneServed(what+fmt.Sprintf(", after the held-back client %d reconnected", h), at, 3*time.Second))
		}
	}
	end := now()
	halt()
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("5 kill -9 restarts and 5 mode switches: verifier %d calls, 0 violations; slowest recovery of every client %v, after the held-back client came back %v",
		v.Len(), worst.Round(time.Millisecond), worstLast.Round(time.Millisecond))
	for c := range n {
		mu.Lock()
		var gap, gapAt time.Duration
		prev, r := from, resets[c]
		for _, e := range ends[c] {
			if e < from || e > end {
				continue
			}
			for len(r) > 0 && r[0] <= e {
				prev = max(prev, r[0]) // held back by the test: no gap
				r = r[1:]
			}
			if e-prev > gap {
				gap, gapAt = e-prev, prev
			}
			prev = e
		}
		mu.Unlock()
		t.Logf("RESTARTS client=%d calls=%d reconnects=%d longest_gap=%v at=%v", c, served(c, 0), clients[c].Stats().Reconnects,
			gap.Round(time.Millisecond), gapAt.Round(time.Millisecond))
	}
}
