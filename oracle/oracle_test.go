package oracle_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/oracle/oracletest"
	"github.com/seqd/seqd/spec"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const T0 = 1_700_000_000_000

func open(t testing.TB, cfg oracle.Config) *oracle.Oracle {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	o, err := oracle.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func mustClaim(t testing.TB, o *oracle.Oracle, n int) uint64 {
	t.Helper()
	v, err := o.ClaimWait(context.Background(), n)
	if err != nil {
		t.Fatalf("ClaimWait(%d): %v", n, err)
	}
	return v
}

func TestOpenStartsAboveLoadedMark(t *testing.T) {
	tests := []struct {
		name   string
		format spec.Format
		mark   uint64
		now    int64
		floor  uint64
		want   uint64
	}{
		{"hybrid fresh", spec.FormatHybrid, 0, T0, 0, ts(T0, 0)},
		{"hybrid mark in the past", spec.FormatHybrid, ts(T0-10, 5), T0, 0, ts(T0, 0)},
		{"hybrid mark ahead of the clock", spec.FormatHybrid, ts(T0+10_000, 5), T0, 0, ts(T0+10_000, 6)},
		{"hybrid floor above the mark", spec.FormatHybrid, ts(T0, 0), T0, ts(T0+50, 0), ts(T0+50, 1)},
		{"counter fresh", spec.FormatCounter, 0, 0, 0, 1},
		{"counter restart", spec.FormatCounter, 1 << 20, 0, 0, 1<<20 + 1},
		{"counter floor", spec.FormatCounter, 100, 0, 5000, 5001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := oracletest.NewMemStore(tt.mark)
			clk := oracletest.NewClock(tt.now)
			o := open(t, oracle.Config{Format: tt.format, Store: store, Clock: clk.Now, Floor: tt.floor})
			// Persist BEFORE hand out: a mark above the old one is durable
			// before Open returns.
			saves := store.Saves()
			if len(saves) == 0 || saves[0] <= max(tt.mark, tt.floor) || o.Mark() != saves[len(saves)-1] {
				t.Fatalf("saves %v, Mark %d: want a save above %d before Open returns", saves, o.Mark(), tt.mark)
			}
			if got := mustClaim(t, o, 1); got != tt.want {
				t.Fatalf("first value %d (%v), want %d (%v)", got, spec.Timestamp(got), tt.want, spec.Timestamp(tt.want))
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	loadErr := errors.New("etcd unavailable")
	failing := oracletest.NewMemStore(0)
	failing.SetLoadErr(loadErr)
	saveFails := oracletest.NewMemStore(0)
	saveFails.SetErr(errors.New("disk full"))
	tests := []struct {
		name string
		cfg  oracle.Config
		want error
	}{
		{"no store", oracle.Config{}, oracle.ErrConfig},
		{"bad format", oracle.Config{Format: 9, Store: oracletest.NewMemStore(0)}, oracle.ErrConfig},
		{"sub-ms window", oracle.Config{HybridWindow: time.Microsecond, Store: oracletest.NewMemStore(0)}, oracle.ErrConfig},
		{"counter window below 2*MaxBatch", oracle.Config{Format: spec.FormatCounter, CounterWindow: 10, MaxBatch: 6, Store: oracletest.NewMemStore(0)}, oracle.ErrConfig},
		{"retry bounds", oracle.Config{RetryMin: time.Second, RetryMax: time.Millisecond, Store: oracletest.NewMemStore(0)}, oracle.ErrConfig},
		{"floor out of range", oracle.Config{Floor: math.MaxUint64, Store: oracletest.NewMemStore(0)}, oracle.ErrRange},
		{"load fails", oracle.Config{Store: failing}, loadErr},
		{"first save fails", oracle.Config{Store: saveFails}, nil},
		{"missing data dir", oracle.Config{Dir: "/nonexistent/seqd"}, oracle.ErrDataDir},
		{"mark at the end of the range", oracle.Config{Store: oracletest.NewMemStore(math.MaxUint64)}, oracle.ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = quiet
			o, err := oracle.Open(context.Background(), tt.cfg)
			if err == nil {
				o.Close()
				t.Fatal("Open succeeded")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Open = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestPersistBeforeHandOut holds the store's saves and checks that no claim
// crosses the last durable mark until a save has returned.
func TestPersistBeforeHandOut(t *testing.T) {
	store := oracletest.NewMemStore(0)
	o := open(t, oracle.Config{Format: spec.FormatCounter, Store: store, CounterWindow: 64, MaxBatch: 8})
	if o.Mark() != 64 {
		t.Fatalf("Mark = %d, want 64", o.Mark())
	}
	release := store.Hold()
	defer release()
	var last uint64
	for {
		ch := o.MarkAdvanced()
		v, err := o.Claim(4)
		if errors.Is(err, oracle.ErrBehind) {
			select {
			case <-ch:
				t.Fatal("mark advanced while the save was held")
			default:
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = v + 3
	}
	if last != 64 || o.Mark() != 64 || store.Mark() != 64 {
		t.Fatalf("stalled at %d with Mark %d, store %d; want 64 everywhere", last, o.Mark(), store.Mark())
	}
	if s := o.Stats(); s.Stalls == 0 || s.Claims != 16 || s.Values != 64 {
		t.Fatalf("Stats = %+v, want a stall after 16 claims of 64 values", s)
	}
	done := make(chan uint64)
	go func() { done <- mustClaim(t, o, 4) }()
	release()
	v := <-done
	if v != 65 || store.Mark() < 68 || o.Mark() > store.Mark() {
		t.Fatalf("after release: value %d, Mark %d, store %d", v, o.Mark(), store.Mark())
	}
}

func TestPersistErrorsAreRetried(t *testing.T) {
	store := oracletest.NewMemStore(0)
	attempts := make(chan uint64, 1000)
	store.BeforeSave = func(m uint64) {
		select {
		case attempts <- m:
		default:
		}
	}
	o := open(t, oracle.Config{Format: spec.FormatCounter, Store: store, CounterWindow: 16, MaxBatch: 1,
		RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond})
	<-attempts // the save in Open
	store.SetErr(errors.New("injected"))
	for {
		if _, err := o.Claim(1); errors.Is(err, oracle.ErrBehind) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	<-attempts // a failing attempt
	<-attempts // and a retry after the backoff
	store.SetErr(nil)
	if v := mustClaim(t, o, 1); v != 17 {
		t.Fatalf("value after recovery %d, want 17", v)
	}
	if s := o.Stats(); s.PersistErrors == 0 || s.Persists < 2 {
		t.Fatalf("Stats = %+v, want persist errors and persists", s)
	}
}

func TestClockStepsBack(t *testing.T) {
	clk := oracletest.NewClock(T0)
	o := open(t, oracle.Config{Store: oracletest.NewMemStore(0), Clock: clk.Now})
	a := mustClaim(t, o, 1)
	clk.Add(-1000)
	b := mustClaim(t, o, 1)
	clk.Add(2000)
	c := mustClaim(t, o, 1)
	if !(a < b && b < c) || c != ts(T0+1000, 0) {
		t.Fatalf("values %v %v %v", spec.Timestamp(a), spec.Timestamp(b), spec.Timestamp(c))
	}
	if s := o.Stats(); s.ClockStepsBack != 1 {
		t.Fatalf("ClockStepsBack = %d, want 1", s.ClockStepsBack)
	}
}

func TestAdvanceAndFloor(t *testing.T) {
	o := open(t, oracle.Config{Format: spec.FormatCounter, Store: oracletest.NewMemStore(0), CounterWindow: 1000, MaxBatch: 10})
	mustClaim(t, o, 10)
	if err := o.Advance(5); !errors.Is(err, oracle.ErrBackward) {
		t.Fatalf("Advance(5) after 10 = %v, want ErrBackward", err)
	}
	if err := o.Advance(math.MaxUint64); !errors.Is(err, oracle.ErrRange) {
		t.Fatalf("Advance(max) = %v, want ErrRange", err)
	}
	if err := o.Advance(5000); err != nil {
		t.Fatal(err)
	}
	if v := mustClaim(t, o, 1); v != 5001 || o.Mark() < 5001 {
		t.Fatalf("after Advance(5000): %d, mark %d", v, o.Mark())
	}
	if err := o.Floor(10); err != nil { // below: no-op
		t.Fatal(err)
	}
	if v := mustClaim(t, o, 1); v != 5002 {
		t.Fatalf("after Floor(10): %d, want 5002", v)
	}
	if err := o.Floor(1 << 40); err != nil { // the NIC handed out up to 1<<40
		t.Fatal(err)
	}
	if v := mustClaim(t, o, 1); v != 1<<40+1 {
		t.Fatalf("after Floor(1<<40): %d", v)
	}
}

func TestBatchSize(t *testing.T) {
	o := open(t, oracle.Config{Store: oracletest.NewMemStore(0), MaxBatch: 64})
	for _, n := range []int{0, -1, 65} {
		if _, err := o.Claim(n); !errors.Is(err, oracle.ErrBatchSize) {
			t.Errorf("Claim(%d) = %v, want ErrBatchSize", n, err)
		}
	}
	if _, err := o.Claim(64); err != nil {
		t.Errorf("Claim(64) = %v", err)
	}
}

func TestClose(t *testing.T) {
	store := oracletest.NewMemStore(0)
	o := open(t, oracle.Config{Format: spec.FormatCounter, Store: store, CounterWindow: 2, MaxBatch: 1})
	mustClaim(t, o, 1)
	mustClaim(t, o, 1)
	release := store.Hold() // nothing advances from here
	defer release()
	errc := make(chan error)
	go func() {
		for {
			_, err := o.ClaimWait(context.Background(), 1)
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, oracle.ErrClosed) {
		t.Fatalf("blocked ClaimWait = %v, want ErrClosed", err)
	}
	if _, err := o.Claim(1); !errors.Is(err, oracle.ErrClosed) {
		t.Fatalf("Claim after Close = %v", err)
	}
	if err := o.Advance(100); !errors.Is(err, oracle.ErrClosed) {
		t.Fatalf("Advance after Close = %v", err)
	}
	<-o.MarkAdvanced() // closed, does not block
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	store2 := oracletest.NewMemStore(0)
	o2 := open(t, oracle.Config{Format: spec.FormatCounter, Store: store2, CounterWindow: 2, MaxBatch: 1})
	rel2 := store2.Hold()
	defer rel2()
	for {
		if _, err := o2.Claim(1); err != nil {
			break
		}
	}
	if _, err := o2.ClaimWait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("ClaimWait with a canceled context = %v", err)
	}
}

// TestConcurrentClaims: many goroutines claim through stalls; every value is
// unique, each goroutine's values increase, and none is above the store's
// mark. Run with -race.
func TestConcurrentClaims(t *testing.T) {
	for _, format := range []spec.Format{spec.FormatCounter, spec.FormatHybrid} {
		t.Run(format.String(), func(t *testing.T) {
			store := oracletest.NewMemStore(0)
			o := open(t, oracle.Config{Format: format, Store: store, CounterWindow: 256, MaxBatch: 8})
			const G, K = 8, 2000
			got := make([][]uint64, G)
			var wg sync.WaitGroup
			for g := range G {
				wg.Go(func() {
					for i := range K {
						n := 1 + (g+i)%8
						first, err := o.ClaimWait(context.Background(), n)
						if err != nil {
							t.Error(err)
							return
						}
						for v := first; v < first+uint64(n); v++ {
							got[g] = append(got[g], v)
						}
					}
				})
			}
			wg.Wait()
			seen := make(map[uint64]int)
			var total uint64
			for g, vs := range got {
				for i, v := range vs {
					if i > 0 && v <= vs[i-1] {
						t.Fatalf("goroutine %d: %d after %d", g, v, vs[i-1])
					}
					if v == 0 || v > store.Mark() {
						t.Fatalf("value %d outside (0, store mark %d]", v, store.Mark())
					}
					if h, dup := seen[v]; dup {
						t.Fatalf("value %d handed to goroutines %d and %d", v, h, g)
					}
					seen[v] = g
				}
				total += uint64(len(vs))
			}
			s := o.Stats()
			if s.Values != total || s.Claims != G*K || o.Current() > o.Mark() && format == spec.FormatHybrid {
				t.Fatalf("Stats %+v; handed out %d values in %d claims", s, total, G*K)
			}
			t.Logf("%s: %d values, %d stalls, %d persists", format, total, s.Stalls, s.Persists)
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := open(t, oracle.Config{Format: spec.FormatCounter, Store: oracletest.NewMemStore(0)})
	if err := o.Register(reg); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, o, 10)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			got[mf.GetName()] = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			got[mf.GetName()] = m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			got[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
		}
		if l := m.GetLabel(); len(l) != 1 || l[0].GetValue() != "counter" {
			t.Errorf("%s labels %v, want format=counter", mf.GetName(), l)
		}
	}
	want := map[string]float64{
		"seqd_oracle_claims_total":             1,
		"seqd_oracle_values_total":             10,
		"seqd_oracle_current_value":            10,
		"seqd_oracle_persisted_mark":           1 << 20,
		"seqd_oracle_persist_duration_seconds": 1,
		"seqd_oracle_persists_total":           1,
		"seqd_oracle_persist_errors_total":     0,
		"seqd_oracle_persist_stalls_total":     0,
		"seqd_oracle_clock_steps_back_total":   0,
		"seqd_oracle_headroom_values":          1<<20 - 10,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
}

// TestGate checks that a refusing Config.Gate stops claims at once, with
// its own error, and that claims resume when it lets them through.
func TestGate(t *testing.T) {
	errFenced := errors.New("fenced")
	var fenced atomic.Bool
	o, err := oracle.Open(context.Background(), oracle.Config{Dir: t.TempDir(), Init: true, Logger: quiet,
		Gate: func() error {
			if fenced.Load() {
				return errFenced
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	a, err := o.Claim(1)
	if err != nil {
		t.Fatal(err)
	}
	fenced.Store(true)
	if _, err := o.Claim(1); err != errFenced {
		t.Fatalf("Claim behind a closed gate = %v, want the gate's error", err)
	}
	if cur := o.Current(); cur != a {
		t.Fatalf("a refused claim moved the counter from %d to %d", a, cur)
	}
	fenced.Store(false)
	if b, err := o.Claim(1); err != nil || b <= a {
		t.Fatalf("Claim after the gate opened = %d, %v; want above %d", b, err, a)
	}
}

// TestClaimAt: with the default clock, ClaimAt takes its floor from the
// caller's reading; an oracle opened with its own clock reads that clock
// instead, whatever the caller passes.
func TestClaimAt(t *testing.T) {
	then := time.Now().Add(-5 * time.Second).UnixMilli()
	o := open(t, oracle.Config{Store: oracletest.NewMemStore(0)})
	v, err := o.ClaimAt(1, then)
	if err != nil || v != ts(then, 0) {
		t.Fatalf("default clock: ClaimAt(1, %d) = %v, %v; want %v", then, spec.Timestamp(v), err, spec.Timestamp(ts(then, 0)))
	}
	clk := oracletest.NewClock(T0)
	own := open(t, oracle.Config{Store: oracletest.NewMemStore(0), Clock: clk.Now})
	if v, err := own.ClaimAt(1, T0+60_000); err != nil || v != ts(T0, 0) {
		t.Fatalf("own clock: ClaimAt(1, T0+60s) = %v, %v; want %v (the oracle's clock)", spec.Timestamp(v), err, spec.Timestamp(ts(T0, 0)))
	}
}
