package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/internal/testbin"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/loadgen/wire"
	"github.com/seqd/seqd/spec"
)

// TestSoak runs the seqd binary for SEQD_SOAK (a duration, e.g. 10m; `make
// soak DURATION=10m`) under mixed-mode load from paced clients, with, in
// a repeating cycle of events one period apart: mode switches, a burst
// from a client whose provider loses, duplicates and reorders packets,
// kill -9 and restart (alternately with server-side loss injected), all
// under verification. It reports violations (must be 0), calls served,
// seqd's RSS and goroutines at the start and end of each incarnation, and
// the test process's own, and fails if any of them grows without bound.
func TestSoak(t *testing.T) {
	ds := os.Getenv("SEQD_SOAK")
	if ds == "" {
		t.Skip("SEQD_SOAK=<duration> runs the soak (make soak DURATION=10m)")
	}
	dur, err := time.ParseDuration(ds)
	if err != nil || dur < 10*time.Second {
		t.Fatalf("SEQD_SOAK=%q: want a duration of at least 10s", ds)
	}
	period := min(max(dur/20, 3*time.Second), 30*time.Second)
	dir := t.TempDir()
	bin := testbin.Seqd(t)
	data := filepath.Join(dir, "data")
	adminAddr, dev, metrics := freePort(t, "tcp"), freePort(t, "udp"), freePort(t, "tcp")
	ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
	defer cancel()

	type incarnation struct {
		mode, opts             string
		rss0, rss1, gor0, gor1 float64
		startedAt, endedAt     time.Duration
	}
	origin := time.Now()
	var incs []*incarnation
	var srv *exec.Cmd
	start := func(mode, opts string) {
		args := []string{"-data", data, "-admin", adminAddr, "-device", dev, "-metrics", metrics, "-mode", mode}
		if len(incs) == 0 {
			args = append(args, "-init") // only the first start is a new deployment
		}
		if opts != "" {
			args = append(args, "-provider-opts", opts)
		}
		cmd := exec.Command(bin, args...)
		cmd.Stderr = io.Discard
		if testing.Verbose() {
			cmd.Stderr = newPrefixWriter(os.Stderr, "seqd: ", slogWarnOnly)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		defer wcancel()
		if err := waitServing(wctx, adminAddr); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("seqd %v: %v", args, err)
		}
		srv = cmd
		inc := &incarnation{mode: mode, opts: opts, startedAt: time.Since(origin)}
		incs = append(incs, inc)
	}
	sample := func() (rss, gor float64) {
		m, err := scrape(metrics, "process_resident_memory_bytes", "go_goroutines")
		if err != nil {
			t.Errorf("metrics: %v", err)
		}
		return m["process_resident_memory_bytes"], m["go_goroutines"]
	}
	start(spec.ModeSpecS0, "")
	defer func() {
		if srv != nil {
			srv.Process.Kill()
			srv.Wait()
		}
	}()
	adm := admintest.Client(ctx, t, adminAddr)

	// The load: paced callers (verification keeps every call: ~40 bytes).
	var v verify.History
	var failed, calls atomic.Uint64
	var fatal atomic.Pointer[error]
	caller := func(c *client.Client, id int, stop <-chan struct{}, wg *sync.WaitGroup) {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s := time.Since(origin)
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			ts, err := c.GetTimestamp(cctx)
			ccancel()
			if err != nil {
				if !errors.Is(err, client.ErrTimeout) && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
					fatal.CompareAndSwap(nil, &err)
					return
				}
				failed.Add(1)
				continue
			}
			v.Record(id, verify.Call{Start: s, End: time.Since(origin), Value: uint64(ts)})
			calls.Add(1)
		}
	}
	dial := func(opts string) *client.Client {
		c, err := client.Dial(ctx, adminAddr, client.WithDevice("soft", "127.0.0.1:0", opts), client.WithQPs(2),
			client.WithWindow(16), client.WithLogger(quietLogger()), client.WithName("soak"))
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		return c
	}
	runtime.GC()
	clientGor0, clientRSS0 := runtime.NumGoroutine(), selfRSS()
	var cs []*client.Client
	stop := make(chan struct{})
	var wg sync.WaitGroup
	nextID := 0
	for range 3 {
		c := dial("")
		cs = append(cs, c)
		for range 3 {
			wg.Add(1)
			go caller(c, nextID, stop, &wg)
			nextID++
		}
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	// Steady state before the first sample.
	waitFor(t, 30*time.Second, func() bool { return calls.Load() > 1000 }, "first calls")
	incs[0].rss0, incs[0].gor0 = sample()

	modes := append(slices.Clone(spec.Modes[1:]), spec.Modes[0]) // every mode, from the second
	events := []string{"set-mode", "loss-burst", "set-mode", "kill9-lossy", "set-mode", "kill9-clean"}
	deadline := time.Now().Add(dur)
	var switches, kills, bursts int
	for ev := 0; time.Now().Before(deadline) && fatal.Load() == nil; ev++ {
		before := calls.Load()
		switch e := events[ev%len(events)]; e {
		case "set-mode":
			m := modes[switches%len(modes)]
			if _, err := adm.SetMode(ctx, &adminpb.SetModeRequest{Mode: m}); err != nil {
				t.Fatalf("set-mode %s: %v", m, err)
			}
			switches++
			sleepCtx(ctx, period)
		case "loss-burst":
			c := dial("loss=0.05,dup=0.02,reorder=0.02")
			bstop := make(chan struct{})
			var bwg sync.WaitGroup
			for range 2 {
				bwg.Add(1)
				go caller(c, nextID, bstop, &bwg)
				nextID++
			}
			sleepCtx(ctx, period)
			close(bstop)
			bwg.Wait()
			if r := c.Stats().Regressions; r != 0 {
				t.Errorf("loss-burst client: %d regressions", r)
			}
			c.Close()
			bursts++
		case "kill9-lossy", "kill9-clean":
			inc := incs[len(incs)-1]
			inc.rss1, inc.gor1 = sample()
			inc.endedAt = time.Since(origin)
			if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			srv.Wait()
			srv = nil
			opts := ""
			if e == "kill9-lossy" {
				opts = "loss=0.01,dup=0.01,reorder=0.01"
			}
			start(modes[(kills+2)%len(modes)], opts)
			kills++
			sleepCtx(ctx, period/2)
			incs[len(incs)-1].rss0, incs[len(incs)-1].gor0 = sample()
			sleepCtx(ctx, period/2)
		}
		// Progress in every period, whatever happened in it.
		waitFor(t, 30*time.Second, func() bool { return calls.Load() > before }, fmt.Sprintf("progress after event %d", ev))
	}
	last := incs[len(incs)-1]
	last.rss1, last.gor1 = sample()
	last.endedAt = time.Since(origin)
	close(stop)
	wg.Wait()
	if p := fatal.Load(); p != nil {
		t.Fatalf("GetTimestamp: %v", *p)
	}
	var regressions uint64
	for _, c := range cs {
		regressions += c.Stats().Regressions
		c.Close()
	}
	cs = nil
	runtime.GC()
	clientGor1, clientRSS1 := runtime.NumGoroutine(), selfRSS()

	violations := 0
	if err := v.Check().Err(); err != nil {
		violations = 1
		t.Errorf("verification: %v", err)
	}
	t.Logf("soak %v (period %v): %d calls verified, %d violations, %d calls timed out or unavailable; %d mode switches, %d kill -9 restarts, %d loss bursts",
		dur, period, v.Len(), violations, failed.Load(), switches, kills, bursts)
	for i, inc := range incs {
		t.Logf("seqd incarnation %d (starts in %s, faults %q, %v..%v): RSS %.1f → %.1f MiB, goroutines %.0f → %.0f",
			i, inc.mode, inc.opts, inc.startedAt.Round(time.Second), inc.endedAt.Round(time.Second),
			inc.rss0/(1<<20), inc.rss1/(1<<20), inc.gor0, inc.gor1)
		if inc.rss0 > 0 && inc.rss1 > 2*inc.rss0+64<<20 {
			t.Errorf("incarnation %d: RSS grew from %.1f to %.1f MiB", i, inc.rss0/(1<<20), inc.rss1/(1<<20))
		}
		if inc.gor0 > 0 && inc.gor1 > inc.gor0+64 {
			t.Errorf("incarnation %d: goroutines grew from %.0f to %.0f", i, inc.gor0, inc.gor1)
		}
	}
	t.Logf("test process (clients): RSS %.1f → %.1f MiB (includes the verifier's history), goroutines %d → %d",
		float64(clientRSS0)/(1<<20), float64(clientRSS1)/(1<<20), clientGor0, clientGor1)
	if clientGor1 > clientGor0+32 {
		t.Errorf("client goroutines grew from %d to %d", clientGor0, clientGor1)
	}
	if regressions != 0 {
		t.Errorf("%d client-side regressions", regressions)
	}
}

// scrape reads the named unlabelled metrics from a /metrics endpoint.
func scrape(addr string, names ...string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if rest, ok := strings.CutPrefix(line, n+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %v", line, err)
				}
				out[n] = f
			}
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return out, fmt.Errorf("no %s in /metrics", n)
		}
	}
	return out, nil
}

// selfRSS is this process's resident set in bytes, 0 if unknown.
func selfRSS() uint64 {
	n, err := wire.ReadRSS(0)
	if err != nil {
		return 0
	}
	return uint64(n)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitFor polls cond until it holds or d passes, then fails the test.
func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// slogWarnOnly passes only seqd's warnings and errors.
func slogWarnOnly(line string) bool {
	return strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")
}

// prefixWriter writes the lines keep accepts, prefixed.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	keep   func(string) bool
	buf    []byte
}

func newPrefixWriter(w io.Writer, prefix string, keep func(string) bool) *prefixWriter {
	return &prefixWriter{w: w, prefix: prefix, keep: keep}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		line := string(p.buf[:i])
		p.buf = p.buf[i+1:]
		if p.keep(line) {
			fmt.Fprintf(p.w, "%s%s\n", p.prefix, line)
		}
	}
	return len(b), nil
}
