package worker

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/dataplane"
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

func (o *oracle) Current() uint64 { return o.next - 1 }

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

func base(o dataplane.Claimer, stopped *atomic.Bool) *Base {
	cfg := &Config{Oracle: o, Behind: errBehind, Logger: slog.New(slog.DiscardHandler)}
	b := &Base{Log: cfg.Logger, cfg: cfg, stopped: stopped}
	b.initClaim()
	b.initCounts([]string{"mine"})
	return b
}

func TestClaim(t *testing.T) {
	var stopped atomic.Bool
	o := &oracle{next: 100, behind: 3}
	b := base(o, &stopped)
	n := &b.Counts
	if first, ok := b.Claim(verbs.Now(), 4); !ok || first != 100 || n.Stalls.Load() != 3 {
		t.Fatalf("Claim = %d, %v with %d stalls; want 100 after 3", first, ok, n.Stalls.Load())
	}
	old := verbs.Now() - verbs.Time(spec.MaxResidence) - verbs.Time(time.Millisecond)
	if _, ok := b.Claim(old, 5); ok || n.Drops[DropExpired].Load() != 5 || o.next != 104 {
		t.Fatalf("an expired batch: ok %v, %d expired, oracle at %d", ok, n.Drops[DropExpired].Load(), o.next)
	}
	o.behind = 1 << 30
	stopped.Store(true)
	if _, ok := b.Claim(verbs.Now(), 2); ok || n.Drops[DropExpired].Load() != 7 {
		t.Fatalf("behind while stopped: ok %v, %d expired, want 7", ok, n.Drops[DropExpired].Load())
	}
	o.err = errors.New("broken")
	if _, ok := b.Claim(verbs.Now(), 3); ok || n.Drops[DropOracle].Load() != 3 {
		t.Fatalf("a failing oracle: ok %v, %d oracle drops, want 3", ok, n.Drops[DropOracle].Load())
	}
}

func TestSum(t *testing.T) {
	var stopped atomic.Bool
	ws := []*fakeWorker{{base(&oracle{}, &stopped)}, {base(&oracle{}, &stopped)}}
	ws[1].ID, ws[1].Core = 1, 3
	ws[0].Requests.Add(10)
	ws[0].Batches.Add(2)
	ws[1].Requests.Add(5)
	ws[1].Batches.Add(1)
	ws[1].Stalls.Add(4)
	ws[0].Drops[DropLate].Add(1)
	ws[1].Drops[NumDrops].Add(2) // "mine"
	st := Sum(ws)
	if st.Served != 15 || st.Batches != 3 || st.Stalls != 4 || st.Drops != 3 || len(st.Workers) != 2 ||
		st.Workers[1].ID != 1 || st.Workers[1].Core != 3 || st.Workers[1].Drops != 2 || st.Workers[0].Requests != 10 {
		t.Fatalf("Sum = %+v", st)
	}
	got := map[string]uint64{}
	for _, c := range st.Counters {
		if c.Name != "drops_total" {
			t.Fatalf("counter %+v", c)
		}
		got[c.Reason] = c.Value
	}
	if len(got) != NumDrops+1 || got["late"] != 1 || got["mine"] != 2 || got["expired"] != 0 {
		t.Fatalf("drops by reason %v", got)
	}
}

type fakeWorker struct{ *Base }

func (fakeWorker) Run() {}

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
	w := base(&oracle{}, &stopped)
	b.ReportAllocs()
	for b.Loop() {
		w.Claim(verbs.Now(), 16)
	}
	b.ReportMetric(float64(w.Drops[DropExpired].Load()/16), "expired")
}

// TestWorkerQueue: each worker's QPs go round-robin over its own share
// of the device's engines (engine i is worker i mod Workers'), and over
// none (0) where there are fewer engines than workers.
func TestWorkerQueue(t *testing.T) {
	cases := []struct {
		queues, workers, id int
		want                []int // Queue of its QPs 0, 1, 2, 3
	}{
		{1, 1, 0, []int{1, 1, 1, 1}},
		{0, 1, 0, []int{0, 0, 0, 0}},
		{2, 2, 0, []int{1, 1, 1, 1}},
		{2, 2, 1, []int{2, 2, 2, 2}},
		{4, 1, 0, []int{1, 2, 3, 4}},
		{5, 2, 0, []int{1, 3, 5, 1}},
		{5, 2, 1, []int{2, 4, 2, 4}},
		{1, 2, 0, []int{0, 0, 0, 0}},
	}
	for _, c := range cases {
		cfg := Config{Device: queuesDev{c.queues}, Workers: c.workers}
		for k, want := range c.want {
			if got := cfg.WorkerQueue(c.id, k); got != want {
				t.Errorf("%d engines, %d workers: worker %d's QP %d on %d, want %d", c.queues, c.workers, c.id, k, got, want)
			}
		}
	}
}

type queuesDev struct{ n int }

func (d queuesDev) Name() string                   { return "queues" }
func (d queuesDev) Attr() verbs.DeviceAttr         { return verbs.DeviceAttr{Queues: d.n} }
func (d queuesDev) AllocPD() (verbs.PD, error)     { return nil, errConfig }
func (d queuesDev) CreateCQ(int) (verbs.CQ, error) { return nil, errConfig }
func (d queuesDev) Close() error                   { return nil }

// atOracle is an oracle that takes the worker's clock reading
// (claim.AtClaimer) and records it.
type atOracle struct {
	oracle
	now []int64
}

func (o *atOracle) ClaimAt(n int, now int64) (uint64, error) {
	o.now = append(o.now, now)
	return o.Claim(n)
}

// TestClaimAtWallClock: a worker claims from an oracle that takes its
// clock reading with the wall clock at the batch's poll, carried forward
// on the monotonic clock from a reading at most a millisecond old.
func TestClaimAtWallClock(t *testing.T) {
	var stopped atomic.Bool
	o := &atOracle{oracle: oracle{next: 100}}
	b := base(o, &stopped)
	for i, ahead := range []time.Duration{0, 0, 5 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond} {
		before := time.Now().Add(ahead).UnixMilli()
		polled := verbs.Now().Add(ahead)
		if _, ok := b.ClaimPolled(polled, polled, 1); !ok {
			t.Fatalf("claim %d refused", i)
		}
		after := time.Now().Add(ahead).UnixMilli()
		if got := o.now[i]; got < before-1 || got > after {
			t.Errorf("claim %d, polled %v ahead: the oracle got %d ms, want the wall clock then (%d to %d)", i, ahead, got, before, after)
		}
	}
}

// TestSendDoneRequest: a successful receive completion (a request's) is
// never an answer's, and SendDone tells without the response QPs (this
// Base has none: asking them would panic); a failed one it cannot tell by
// its opcode, which is undefined.
func TestSendDoneRequest(t *testing.T) {
	var stopped atomic.Bool
	b := base(&oracle{}, &stopped)
	if b.SendDone(&verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecv, QPN: 7, ID: 3 << 8}) {
		t.Fatal("a request's completion taken for an answer's")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a failed completion was not handed to the response QPs")
		}
	}()
	b.SendDone(&verbs.WC{Status: verbs.WCGeneralErr, Opcode: verbs.WCRecv})
}
