package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

// startMode runs seqd in-process in mode and returns its admin address.
func startMode(t testing.TB, provOpts, mode string) string {
	t.Helper()
	return startConfig(t, server.Config{ProviderOpts: provOpts, Mode: mode, Workers: 2, MaxWindow: 64})
}

func dialN(t testing.TB, ctx context.Context, addr, provOpts string, n int) []*client.Client {
	t.Helper()
	var cs []*client.Client
	for i := range n {
		c, err := client.Dial(ctx, addr, client.WithDevice("soft", "127.0.0.1:0", provOpts),
			client.WithQPs(2), client.WithWindow(16), client.WithName("e2e"), client.WithLogger(quietLogger()),
			client.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// load runs callers goroutines over clients until stop is closed (or each
// made perCaller calls), recording every call in v.
func load(ctx context.Context, clients []*client.Client, callers, perCaller int, v *verify.History, stop <-chan struct{}) error {
	origin := time.Now()
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for i := 0; perCaller == 0 || i < perCaller; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Since(origin)
				ts, err := c.GetTimestamp(ctx)
				end := time.Since(origin)
				if err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				v.Record(g, verify.Call{Start: start, End: end, Value: uint64(ts)})
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// TestEveryMode: the real-time-order/uniqueness check passes in every
// registered mode, clean and with loss, duplication and reordering
// injected.
func TestEveryMode(t *testing.T) {
	for _, mode := range modes.All {
		for _, f := range []struct{ name, opts string }{{"clean", ""}, {"faults", "loss=0.05,dup=0.05,reorder=0.05"}} {
			t.Run(mode+"/"+f.name, func(t *testing.T) {
				addr := startMode(t, f.opts, mode)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cs := dialN(t, ctx, addr, f.opts, 2)
				for _, c := range cs {
					if c.Mode() != mode {
						t.Fatalf("client connected in %q, server runs %q", c.Mode(), mode)
					}
				}
				var v verify.History
				if err := load(ctx, cs, 6, 500, &v, nil); err != nil {
					t.Fatalf("GetTimestamp: %v", err)
				}
				if v.Len() != 3000 {
					t.Fatalf("%d calls recorded", v.Len())
				}
				if err := v.Check().Err(); err != nil {
					t.Fatal(err)
				}
				for i, c := range cs {
					if s := c.Stats(); s.Regressions != 0 {
						t.Errorf("client %d: %d regressions", i, s.Regressions)
					}
				}
			})
		}
	}
}

// switchOrder is the modes to switch to from all[0]: through every other
// mode and back to all[0], then the other way round, so that each mode
// follows and precedes several others.
func switchOrder(all []string) []string {
	var order []string
	order = append(order, all[1:]...)
	order = append(order, all[0])
	for i := len(all) - 2; i >= 1; i-- {
		order = append(order, all[i])
	}
	return append(order, all[0])
}

// TestSwitchModes switches modes 20 times, and at least once through
// switchOrder, under load from concurrent clients and checks the whole
// history.
func TestSwitchModes(t *testing.T) {
	opts := ""
	addr := startMode(t, opts, spec.ModeSpecS0)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cs := dialN(t, ctx, addr, opts, 3)
	adm := admintest.Client(ctx, t, addr)
	var v verify.History
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- load(ctx, cs, 6, 0, &v, stop) }()
	order := switchOrder(modes.All)
	var lastHigh uint64
	for i := range max(20, len(order)) {
		before := v.Len()
		// Let every mode serve some calls before switching away.
		deadline := time.Now().Add(10 * time.Second)
		for v.Len() < before+200 {
			if time.Now().After(deadline) {
				t.Fatalf("switch %d: no progress (%d calls)", i, v.Len())
			}
			time.Sleep(time.Millisecond)
		}
		mode := order[i%len(order)]
		resp, err := adm.SetMode(ctx, &adminpb.SetModeRequest{Mode: mode})
		if err != nil {
			t.Fatalf("switch %d to %s: %v", i, mode, err)
		}
		if resp.GetHigh() < lastHigh {
			t.Fatalf("switch %d: high went back from %d to %d", i, lastHigh, resp.GetHigh())
		}
		lastHigh = resp.GetHigh()
	}
	// The last mode serves calls too before the load stops.
	for before, deadline := v.Len(), time.Now().Add(10*time.Second); v.Len() < before+200; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the last switch: no progress (%d calls)", v.Len())
		}
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatalf("GetTimestamp: %v", err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls over 20 switches", v.Len())
	for i, c := range cs {
		s := c.Stats()
		t.Logf("client %d: %+v", i, s)
		if s.Regressions != 0 {
			t.Errorf("client %d: %d regressions", i, s.Regressions)
		}
	}
}
