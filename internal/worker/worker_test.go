package worker

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

var errConfig = errors.New("test: invalid config")

type oracle struct {
	next   uint64
	behind int // refuse this many claims with errBehind first
	err    error
}

var errBehind = errors.New("behind")

func (o *oracle) Claim(n int) (uint64, error) {
	if o.err != nil {
		return 0, o.err
	}
	if o.behind > 0 {
		o.behind--
		return 0, errBehind
	}
	f := o.next
	o.next += uint64(n)
	return f, nil
}

func device(t *testing.T) verbs.Device {
	d, err := verbs.Open("soft", "127.0.0.1:0", nil)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestFill(t *testing.T) {
	dev := device(t)
	c := Config{Device: dev, Oracle: &oracle{}}
	if err := c.Fill(errConfig); err != nil {
		t.Fatal(err)
	}
	if c.Workers != DefaultWorkers || c.RespQPs != DefaultRespQPs || c.Batch != DefaultBatch ||
		c.SignalEvery != DefaultSignalEvery || c.SendDepth != DefaultSendDepth || c.QKey != verbs.DefaultQKey ||
		c.Epoch == 0 || c.Logger == nil {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if c.Core(0) != -1 {
		t.Fatalf("Core(0) = %d without Cores, want -1", c.Core(0))
	}
	c = Config{Device: dev, Oracle: &oracle{}, Workers: 2, Cores: []int{3}}
	if err := c.Fill(errConfig); err != nil || c.Core(0) != 3 || c.Core(1) != -1 {
		t.Fatalf("Cores [3] of 2 workers: %v, cores %d %d", err, c.Core(0), c.Core(1))
	}
	for name, bad := range map[string]Config{
		"no device":     {Oracle: &oracle{}},
		"negative":      {Device: dev, Oracle: &oracle{}, RespQPs: -1},
		"shallow sends": {Device: dev, Oracle: &oracle{}, Batch: 64, SendDepth: 100},
		"more cores":    {Device: dev, Oracle: &oracle{}, Workers: 1, Cores: []int{0, 1}},
	} {
		if err := bad.Fill(errConfig); !errors.Is(err, errConfig) {
			t.Errorf("%s: Fill = %v, want errConfig", name, err)
		}
	}
}

type counts struct{ stalls, expired, late, oracle, send atomic.Uint64 }

func base(o *oracle, stopped *atomic.Bool) (*Base, *counts) {
	n := &counts{}
	cfg := &Config{Oracle: o, Behind: errBehind, Logger: slog.New(slog.DiscardHandler)}
	b := &Base{Log: cfg.Logger, cfg: cfg, stopped: stopped,
		count: Counters{Stalls: &n.stalls, Expired: &n.expired, Late: &n.late, Oracle: &n.oracle, Send: &n.send}}
	return b, n
}

func TestClaim(t *testing.T) {
	var stopped atomic.Bool
	o := &oracle{next: 100, behind: 3}
	b, n := base(o, &stopped)
	if first, ok := b.Claim(verbs.Now(), 4); !ok || first != 100 || n.stalls.Load() != 3 {
		t.Fatalf("Claim = %d, %v with %d stalls; want 100 after 3", first, ok, n.stalls.Load())
	}
	old := verbs.Now() - verbs.Time(spec.MaxResidence) - verbs.Time(time.Millisecond)
	if _, ok := b.Claim(old, 5); ok || n.expired.Load() != 5 || o.next != 104 {
		t.Fatalf("an expired batch: ok %v, %d expired, oracle at %d", ok, n.expired.Load(), o.next)
	}
	o.behind = 1 << 30
	stopped.Store(true)
	if _, ok := b.Claim(verbs.Now(), 2); ok || n.expired.Load() != 7 {
		t.Fatalf("behind while stopped: ok %v, %d expired, want 7", ok, n.expired.Load())
	}
	o.err = errors.New("broken")
	if _, ok := b.Claim(verbs.Now(), 3); ok || n.oracle.Load() != 3 {
		t.Fatalf("a failing oracle: ok %v, %d oracle drops, want 3", ok, n.oracle.Load())
	}
}

func TestInitNeedsCounters(t *testing.T) {
	var b Base
	var stopped atomic.Bool
	if err := b.Init(&Config{}, 0, nil, nil, 8, &stopped, Counters{}); err == nil {
		t.Fatal("Init without counters succeeded")
	}
}

func TestCloseAll(t *testing.T) {
	var cq verbs.CQ // nil: never created
	closed := 0
	CloseAll(cq, closer(func() { closed++ }), nil)
	if closed != 1 {
		t.Fatalf("closed %d, want 1", closed)
	}
}

type closer func()

func (c closer) Close() error { c(); return nil }

// BenchmarkClaim is the claim of a batch on the hot path: it allocates
// nothing. (A claim the machine descheduled for longer than
// spec.MaxResidence expires; that is counted, not a failure.)
func BenchmarkClaim(b *testing.B) {
	var stopped atomic.Bool
	w, n := base(&oracle{}, &stopped)
	b.ReportAllocs()
	for b.Loop() {
		w.Claim(verbs.Now(), 16)
	}
	b.ReportMetric(float64(n.expired.Load()/16), "expired")
}
