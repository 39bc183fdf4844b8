package ha_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/e2e"
	"github.com/seqd/seqd/ha/hatest"
	_ "github.com/seqd/seqd/verbs/soft"
)

// proc is one HA instance running as its own process.
type proc struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func buildNode(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH: cannot build the HA instance binary")
	}
	bin := filepath.Join(t.TempDir(), "hanode")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/seqd/seqd/ha/internal/hanode").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func startProc(t *testing.T, bin string, eps []string, prefix string) *proc {
	t.Helper()
	ports := hatest.FreePorts(t, 1)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logf, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-etcd", joinComma(eps), "-admin", addr, "-prefix", prefix, "-ttl", ttl.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGCONT); p.signal(syscall.SIGKILL); <-p.done })
	return p
}

func (p *proc) signal(s syscall.Signal) { p.cmd.Process.Signal(s) }

func joinComma(s []string) string {
	out := ""
	for i, e := range s {
		if i > 0 {
			out += ","
		}
		out += e
	}
	return out
}

// procLeader waits until etcd names a leader among ps (and not skip).
func procLeader(t *testing.T, cli *clientv3.Client, prefix string, ps []*proc, skip *proc, within time.Duration) *proc {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := cli.Get(ctx, prefix+"/election/", clientv3.WithFirstCreate()...)
		cancel()
		if err == nil && len(resp.Kvs) == 1 {
			for _, p := range ps {
				if p != skip && p.addr == string(resp.Kvs[0].Value) {
					return p
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no leader among the instances within %v", within)
	return nil
}

// procLoad drives callers through the client library. A caller whose
// client fails dials the instances in turn until one admits it: standbys
// refuse (redirect), the leader admits.
type procLoad struct {
	addrs []string
	v     e2e.Verifier
	base  time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	succ  []time.Duration
	errs  int
}

func startProcLoad(addrs []string, callers int) *procLoad {
	l := &procLoad{addrs: addrs, base: time.Now(), stop: make(chan struct{})}
	for id := range callers {
		l.wg.Add(1)
		go l.caller(id)
	}
	return l
}

func (l *procLoad) now() time.Duration { return time.Since(l.base) }

func (l *procLoad) dial(next *int) *client.Client {
	for {
		select {
		case <-l.stop:
			return nil
		default:
		}
		addr := l.addrs[*next%len(l.addrs)]
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := client.Dial(ctx, addr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithLogger(quiet()),
			client.WithWindow(8), client.WithTimeout(300*time.Millisecond))
		cancel()
		if err == nil {
			return c
		}
		*next++
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *procLoad) caller(id int) {
	defer l.wg.Done()
	next := id
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for {
		start := l.now()
		for {
			if c == nil {
				if c = l.dial(&next); c == nil {
					return
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			ts, err := c.GetTimestamp(ctx)
			cancel()
			if err == nil {
				end := l.now()
				l.v.Record(e2e.Call{Caller: id, Start: start, End: end, Value: uint64(ts)})
				l.mu.Lock()
				l.succ = append(l.succ, end)
				l.mu.Unlock()
				break
			}
			l.mu.Lock()
			l.errs++
			l.mu.Unlock()
			c.Close()
			c = nil
			select {
			case <-l.stop:
				return
			default:
			}
		}
		select {
		case <-l.stop:
			return
		case <-time.After(500 * time.Microsecond):
		}
	}
}

func (l *procLoad) successes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.succ)
}

func (l *procLoad) waitCalls(t *testing.T, n int, within time.Duration) {
	t.Helper()
	want := l.successes() + n
	deadline := time.Now().Add(within)
	for l.successes() < want {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d calls succeeded within %v", l.successes()-want+n, n, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *procLoad) gap(after time.Duration) time.Duration {
	l.mu.Lock()
	s := slices.Clone(l.succ)
	l.mu.Unlock()
	slices.Sort(s)
	var g time.Duration
	prev := after
	for _, e := range s {
		if e >= after {
			g = max(g, e-prev)
			prev = e
		}
	}
	return g
}

func (l *procLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if err := l.v.Check(); err != nil {
		t.Fatalf("verifier: %v", err)
	}
	t.Logf("verified %d calls across processes (%d failed attempts, retried): unique, per-caller monotonic, real-time ordered", l.v.Len(), l.errs)
}

// TestProcessFaults runs three HA instances as processes against a real
// 3-member etcd, under load through the client library over the soft
// RoCEv2 provider, and kills (-9) or pauses (SIGSTOP past its lease) the
// leader.
func TestProcessFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes and waits out lease TTLs; skipped in -short")
	}
	c := hatest.Start(t, 3)
	bin := buildNode(t)
	cli := c.Client()
	setup := func(t *testing.T) (string, []*proc, *procLoad, *proc) {
		prefix := "/" + t.Name()
		var ps []*proc
		var addrs []string
		for range 3 {
			p := startProc(t, bin, c.Endpoints(), prefix)
			ps = append(ps, p)
			addrs = append(addrs, p.addr)
		}
		lead := procLeader(t, cli, prefix, ps, nil, 15*time.Second)
		l := startProcLoad(addrs, 4)
		l.waitCalls(t, 300, 15*time.Second)
		return prefix, ps, l, lead
	}

	t.Run("leader-kill-9", func(t *testing.T) {
		prefix, ps, l, lead := setup(t)
		at := l.now()
		lead.signal(syscall.SIGKILL)
		procLeader(t, cli, prefix, ps, lead, 2*ttl)
		l.waitCalls(t, 300, 2*ttl)
		l.finish(t)
		g := l.gap(at)
		report(t, "leader process killed with -9", g)
		if g > 2*ttl {
			t.Errorf("failover took %v, want within 2×TTL = %v", g, 2*ttl)
		}
	})

	t.Run("leader-sigstop", func(t *testing.T) {
		prefix, ps, l, lead := setup(t)
		at := l.now()
		lead.signal(syscall.SIGSTOP)
		procLeader(t, cli, prefix, ps, lead, 3*ttl)
		l.waitCalls(t, 300, 2*ttl)
		// The deposed leader wakes up believing it leads: its gate must
		// refuse at once, and its late save must be refused by etcd.
		lead.signal(syscall.SIGCONT)
		l.waitCalls(t, 1000, 10*time.Second)
		l.finish(t)
		report(t, "leader SIGSTOPped past its lease, then resumed", l.gap(at))
	})
}
