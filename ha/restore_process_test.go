package ha_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/spec"
)

// startSeqdDir starts an instance whose admin plane listens on addr and
// whose -data is dir: a restart of the same instance, on the same disk.
func startSeqdDir(t *testing.T, bin string, eps []string, prefix, addr, dir string, extra ...string) *seqdProc {
	t.Helper()
	p := &seqdProc{addr: addr, log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	args := append([]string{"-etcd-endpoints", strings.Join(eps, ","), "-etcd-prefix", prefix,
		"-lease-ttl", ttl.String(), "-admin", p.addr, "-device", "127.0.0.1:0", "-metrics", "off",
		"-data", dir}, extra...)
	p.cmd = exec.Command(bin, args...)
	w := syncWriter{p.mu, p.log}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("seqd %s log (tail):\n%s", p.addr, tail(p.logText(), 3000))
		}
	})
	return p
}

func (p *seqdProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop stops the instance with SIGTERM and waits for it to exit.
func (p *seqdProc) stop(t *testing.T) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("seqd %s did not exit within 20s of SIGTERM", p.addr)
	}
}

// exited reports whether the instance has exited.
func (p *seqdProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestRestoredMarkRefused is the restore of an etcd snapshot in counter
// format: a group serves, its mark is copied (the snapshot), the group
// moves on past it, stops, and the old mark is put back (the restore).
// Restarted on the same data directories, even with -init, the instances
// must refuse to serve, naming the witness and the way out, instead of
// serving again values above the old mark; restarted with -advance at the
// witness they must serve above every value served before.
func TestRestoredMarkRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seqd and etcd processes; skipped in -short")
	}
	c := hatest.Start(t, 1)
	bin := buildSeqd(t)
	eps := c.Endpoints()
	prefix := "/" + t.Name()
	ports := hatest.FreePorts(t, 2)
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	dirs := []string{t.TempDir(), t.TempDir()}
	start := func(extra ...string) []*seqdProc {
		var ps []*seqdProc
		for i := range addrs {
			ps = append(ps, startSeqdDir(t, bin, eps, prefix, addrs[i], dirs[i], append([]string{"-format", "counter"}, extra...)...))
		}
		return ps
	}

	ps := start("-init")
	seqdLeader(t, ps, nil, 15*time.Second)
	first := servedIn(t, ps, spec.ModeSpecS0, 0)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	markKey := prefix + "/mark"
	snap, err := cli.Get(ctx, markKey)
	if err != nil || len(snap.Kvs) != 1 {
		t.Fatalf("read the mark (the snapshot): %v, %d keys", err, len(snap.Kvs))
	}
	oldMark := snap.Kvs[0].Value

	// The group moves on: well past the snapshot's mark.
	lead := seqdLeader(t, ps, nil, 15*time.Second)
	if _, err := adminCall(t, lead.addr, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.AdvanceResponse, error) {
		return a.Advance(ctx, &adminpb.AdvanceRequest{Min: first + 5_000_000})
	}); err != nil {
		t.Fatalf("advance: %v", err)
	}
	highest := servedIn(t, ps, spec.ModeSpecS0, first+5_000_000)
	for _, p := range ps {
		p.stop(t)
	}

	// The restore: etcd holds the snapshot's mark again.
	if _, err := cli.Put(ctx, markKey, string(oldMark)); err != nil {
		t.Fatalf("put back the old mark: %v", err)
	}
	old, _ := strconv.ParseUint(string(oldMark), 16, 64)
	t.Logf("snapshot mark %d; highest value served before the restore %d", old, highest)

	// -init as in the Kubernetes manifest: it must not matter, a mark
	// exists. Every instance must stop; none may serve.
	ps = start("-init")
	deadline := time.Now().Add(30 * time.Second)
	for !(ps[0].exited() && ps[1].exited()) {
		if time.Now().After(deadline) {
			t.Fatalf("an instance still runs 30s after starting on the restored mark")
		}
		if v, ok := serveOne(ps); ok {
			t.Fatalf("the group served %d after the restore (the highest value served before it: %d): values served again", v, highest)
		}
		time.Sleep(20 * time.Millisecond)
	}
	witness := uint64(0)
	re := regexp.MustCompile(`at least (\d+) \(this witness`)
	for _, p := range ps {
		log := p.logText()
		for _, want := range []string{"below this instance's witness", "holds mark " + strconv.FormatUint(old, 10),
			strconv.Quote(prefix), eps[0], "a restored etcd snapshot", "another group's prefix", "-advance VALUE"} {
			if !strings.Contains(log, want) {
				t.Errorf("seqd %s refused without %q in its log", p.addr, want)
			}
		}
		m := re.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("seqd %s: no witness value in its refusal", p.addr)
		}
		w, _ := strconv.ParseUint(m[1], 10, 64)
		witness = max(witness, w)
	}
	if witness < highest {
		t.Fatalf("the witness %d is below the highest value served %d: it cannot be the lower bound for -advance", witness, highest)
	}

	// The way out: -advance at the witness (the lower bound it names).
	ps = start("-advance", strconv.FormatUint(witness, 10))
	seqdLeader(t, ps, nil, 15*time.Second)
	last := servedIn(t, ps, spec.ModeSpecS0, max(highest, witness))
	t.Logf("refused, then with -advance %d served up to %d, above %d served before", witness, last, highest)
}

// serveOne asks for one value from an instance among ps that reports
// itself leader, if any: the value and true when one was served.
func serveOne(ps []*seqdProc) (uint64, bool) {
	for _, p := range ps {
		if p.exited() {
			continue
		}
		if st, err := p.status(); err != nil || st.GetRole() != adminclient.RoleLeader {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cl, err := client.Dial(ctx, p.addr, client.WithDevice("soft", "127.0.0.1:0", ""),
			client.WithLogger(quiet()), client.WithTimeout(500*time.Millisecond))
		if err != nil {
			cancel()
			continue
		}
		ts, err := cl.GetTimestamp(ctx)
		cl.Close()
		cancel()
		if err == nil {
			return uint64(ts), true
		}
	}
	return 0, false
}
