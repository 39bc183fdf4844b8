package oracle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/spec"
)

// Oracle hands out batches of strictly increasing values. It wraps a
// Counter with a Store and a persister goroutine that keeps the persisted
// mark ahead of the values handed out. All methods are safe for concurrent
// use.
type Oracle struct {
	c        *Counter
	closed   atomic.Bool
	maxBatch int
	gate     func() error  // Config.Gate; nil when not set
	ownClock bool          // Config.Clock was set: ClaimAt reads it too
	kick     chan struct{} // wakes the persister; buffered, never blocks
	_        [cacheLine]byte

	stripes [statStripes]statStripe // claims and values, spread by value

	cfg    Config
	store  Store
	owned  *FileStore // the FileStore Open opened (Config.Dir), closed by Close
	log    *slog.Logger
	ctx    context.Context // canceled by Close; bounds saves
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	advanced chan struct{} // closed and replaced each time the mark advances

	attempted     uint64 // highest mark passed to Save; persister only
	persists      atomic.Uint64
	persistErrors atomic.Uint64
	lastLatency   atomic.Int64 // nanoseconds
	persistHist   prometheus.Histogram
}

const statStripes = 8

type statStripe struct {
	claims atomic.Uint64
	values atomic.Uint64
	_      [cacheLine - 16]byte
}

// Stats is a snapshot of an Oracle's counters.
type Stats struct {
	Claims             uint64        // successful claims
	Values             uint64        // values handed out
	Stalls             uint64        // claims that returned ErrBehind
	ClockStepsBack     uint64        // wall clock seen stepping backward
	Persists           uint64        // successful saves
	PersistErrors      uint64        // failed saves
	LastPersistLatency time.Duration // duration of the last save
	Current            uint64        // last value handed out
	Mark               uint64        // persisted mark
}

// Open loads the persisted mark, raises the counter above it, saves a new
// mark, and starts the persister. Once Open returns, claims succeed; no
// value is handed out before a mark above it is durable.
func Open(ctx context.Context, cfg Config) (*Oracle, error) {
	ownClock := cfg.Clock != nil
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store := cfg.Store
	if store == nil {
		if cfg.Init {
			if err := InitDir(cfg.Dir); err != nil {
				return nil, err
			}
		}
		fs, err := OpenFileStore(cfg.Dir)
		if err != nil {
			return nil, err
		}
		store = fs
	}
	o, err := open(ctx, cfg, ownClock, store)
	if err != nil {
		if fs, ok := store.(*FileStore); ok && cfg.Store == nil {
			fs.Close() // release the directory's lock
		}
		return nil, err
	}
	return o, nil
}

// open is Open once the store is open.
func open(ctx context.Context, cfg Config, ownClock bool, store Store) (*Oracle, error) {
	m, err := store.Load(ctx)
	switch {
	case errors.Is(err, ErrNoMark) && (cfg.Init || cfg.Floor > 0):
		m = 0 // a new deployment, or a recovery above cfg.Floor
		cfg.Logger.Info("oracle: no mark file: a new deployment (Init) or a recovery above Floor", "init", cfg.Init, "floor", cfg.Floor)
	case err != nil:
		return nil, fmt.Errorf("oracle: loading mark: %w", err)
	}
	if m >= limit {
		return nil, fmt.Errorf("oracle: persisted mark %d: %w", m, ErrRange)
	}
	c := NewCounter(cfg.Format, cfg.window(), cfg.Clock)
	if err := c.Floor(max(m, cfg.Floor)); err != nil {
		return nil, fmt.Errorf("oracle: raising the counter to %d: %w", max(m, cfg.Floor), err)
	}
	c.SetMark(m)
	ctx2, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o := &Oracle{
		c:         c,
		maxBatch:  cfg.MaxBatch,
		gate:      cfg.Gate,
		ownClock:  ownClock,
		kick:      make(chan struct{}, 1),
		cfg:       cfg,
		store:     store,
		log:       cfg.Logger,
		ctx:       ctx2,
		cancel:    cancel,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		advanced:  make(chan struct{}),
		attempted: m,
		persistHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "seqd_oracle_persist_duration_seconds",
			Help:        "Time to make one high-water mark durable (Store.Save).",
			ConstLabels: prometheus.Labels{"format": cfg.Format.String()},
			Buckets:     prometheus.ExponentialBuckets(50e-6, 2, 18), // 50µs to ~6.5s
		}),
	}
	p := c.Plan()
	if !p.Due {
		cancel()
		return nil, fmt.Errorf("oracle: persisted mark %d leaves no room: %w", m, ErrRange)
	}
	if cfg.Format == spec.FormatHybrid && spec.Timestamp(m).Physical().UnixMilli() > p.Now+int64(cfg.HybridWindow/time.Millisecond) {
		o.log.Warn("oracle: clock is behind the persisted mark; timestamps run ahead of the clock until it catches up",
			"mark", spec.Timestamp(m).String(), "now_ms", p.Now)
	}
	if err := o.persist(ctx, p.Target); err != nil {
		cancel()
		return nil, fmt.Errorf("oracle: saving the first mark: %w", err)
	}
	o.log.Info("oracle: opened", "format", cfg.Format.String(), "loaded_mark", m,
		"floor", c.Current(), "mark", c.Mark())
	if fs, ok := store.(*FileStore); ok && cfg.Store == nil {
		o.owned = fs
	}
	go o.run()
	return o, nil
}

// Claim reserves n consecutive values and returns the first: the batch is
// first..first+n-1, every value above every value handed out before. It
// never blocks and never allocates. If the batch would cross the persisted
// mark, Claim returns ErrBehind and wakes the persister: keep the batch and
// retry (idle paths: wait on MarkAdvanced, or use ClaimWait). If a
// Config.Gate is set and refuses, Claim returns the gate's error and claims
// nothing. n must be in [1, Config.MaxBatch].
func (o *Oracle) Claim(n int) (first uint64, err error) { return o.claim(n, 0, false) }

// ClaimAt is Claim for a caller that read the wall clock itself (now, in
// Unix milliseconds; see Counter.ClaimAt): a worker that reads the clock
// when it polls a batch claims with that reading instead of another. An
// oracle opened with its own Config.Clock ignores now and reads that
// clock, as Claim does: the reading stands only for the default, the
// wall clock.
func (o *Oracle) ClaimAt(n int, now int64) (first uint64, err error) {
	return o.claim(n, now, !o.ownClock)
}

func (o *Oracle) claim(n int, now int64, at bool) (first uint64, err error) {
	if o.closed.Load() {
		return 0, ErrClosed
	}
	if n > o.maxBatch {
		return 0, ErrBatchSize
	}
	if o.gate != nil {
		if err := o.gate(); err != nil {
			return 0, err
		}
	}
	first, err = o.c.claim(n, now, at)
	if err != nil {
		if err == ErrBehind {
			o.wake()
		}
		return 0, err
	}
	if first+uint64(n-1) >= o.c.Low() {
		o.wake()
	}
	s := &o.stripes[(first*0x9E3779B97F4A7C15)>>(64-3)]
	s.claims.Add(1)
	s.values.Add(uint64(n))
	return first, nil
}

// ClaimWait is Claim for idle paths: on ErrBehind it waits for the mark to
// advance and retries, until ctx is done or the oracle is closed.
func (o *Oracle) ClaimWait(ctx context.Context, n int) (uint64, error) {
	for {
		// Take the channel before claiming, so an advance between the
		// claim and the wait is not missed.
		ch := o.MarkAdvanced()
		first, err := o.Claim(n)
		if err != ErrBehind {
			return first, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// MarkAdvanced returns a channel that is closed the next time the persisted
// mark advances, or when the oracle closes. Take it before the Claim whose
// ErrBehind you will wait on.
func (o *Oracle) MarkAdvanced() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.advanced
}

// Current returns the last value handed out (an upper bound; see
// Counter.Current).
func (o *Oracle) Current() uint64 { return o.c.Current() }

// Mark returns the persisted mark.
func (o *Oracle) Mark() uint64 { return o.c.Mark() }

// Format returns the oracle's format.
func (o *Oracle) Format() spec.Format { return o.c.Format() }

// Advance moves the counter forward for an operator: the next value handed
// out is above to. It returns ErrBackward if to is below the current value.
// Claims stall (ErrBehind) until the persister has saved a mark above to.
func (o *Oracle) Advance(to uint64) error {
	if o.closed.Load() {
		return ErrClosed
	}
	if cur := o.c.Current(); to < cur {
		return fmt.Errorf("%w: %d is below the current value %d", ErrBackward, to, cur)
	}
	if err := o.c.Floor(to); err != nil {
		return fmt.Errorf("oracle: advance to %d: %w", to, err)
	}
	o.log.Info("oracle: advanced by operator", "to", to, "mark", o.c.Mark())
	o.wake()
	return nil
}

// Floor makes the next claim return a value above v, whatever the current
// value: it continues from a value advanced elsewhere (for example by a NIC
// that was handed the counter for a while). It never moves the counter
// backward. Claims stall until a mark above v is saved.
func (o *Oracle) Floor(v uint64) error {
	if o.closed.Load() {
		return ErrClosed
	}
	if err := o.c.Floor(v); err != nil {
		return fmt.Errorf("oracle: floor %d: %w", v, err)
	}
	o.wake()
	return nil
}

// Stats returns a snapshot of the oracle's counters.
func (o *Oracle) Stats() Stats {
	s := Stats{
		Stalls:             o.c.Stalls(),
		ClockStepsBack:     o.c.ClockStepsBack(),
		Persists:           o.persists.Load(),
		PersistErrors:      o.persistErrors.Load(),
		LastPersistLatency: time.Duration(o.lastLatency.Load()),
		Current:            o.c.Current(),
		Mark:               o.c.Mark(),
	}
	for i := range o.stripes {
		s.Claims += o.stripes[i].claims.Load()
		s.Values += o.stripes[i].values.Load()
	}
	return s
}

// Close stops the persister and fails later claims with ErrClosed. Values
// already handed out stay below the persisted mark. Close is idempotent.
func (o *Oracle) Close() error {
	if o.closed.Swap(true) {
		return nil
	}
	close(o.stop)
	o.cancel()
	<-o.done
	o.mu.Lock()
	close(o.advanced) // wake waiters; later MarkAdvanced calls get it closed
	o.mu.Unlock()
	if o.owned != nil {
		if err := o.owned.Close(); err != nil { // the data directory's lock
			o.log.Warn("oracle: releasing the data directory lock", "err", err)
		}
	}
	o.log.Info("oracle: closed", "current", o.c.Current(), "mark", o.c.Mark())
	return nil
}

// wake pokes the persister without blocking.
func (o *Oracle) wake() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// persist saves target (or the highest mark attempted before, so saves
// never go backward) and, only once it is durable, lets the counter use it.
func (o *Oracle) persist(ctx context.Context, target uint64) error {
	target = max(target, o.attempted)
	o.attempted = target
	ctx, cancel := context.WithTimeout(ctx, o.cfg.SaveTimeout)
	start := time.Now()
	err := o.store.Save(ctx, target)
	lat := time.Since(start)
	cancel()
	o.lastLatency.Store(int64(lat))
	o.persistHist.Observe(lat.Seconds())
	if err != nil {
		o.persistErrors.Add(1)
		return fmt.Errorf("oracle: saving mark %d: %w", target, err)
	}
	o.persists.Add(1)
	if o.c.SetMark(target) { // persist BEFORE hand out
		o.mu.Lock()
		close(o.advanced)
		o.advanced = make(chan struct{})
		o.mu.Unlock()
	}
	return nil
}

// run is the persister: it saves a new mark whenever the headroom drops
// below half the window, woken by claims (kick), by the clock (hybrid), or
// after a backoff when a save failed.
func (o *Oracle) run() {
	defer close(o.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	retry := o.cfg.RetryMin
	var steps, stalls uint64
	for {
		steps, stalls = o.logEvents(steps, stalls)
		p := o.c.Plan()
		if p.Due {
			err := o.persist(o.ctx, p.Target)
			if err == nil {
				retry = o.cfg.RetryMin
				continue
			}
			if o.ctx.Err() != nil {
				return
			}
			o.log.Warn("oracle: persisting the mark failed; claims stall once the headroom is used",
				"err", err, "retry_in", retry, "mark", o.c.Mark(), "current", o.c.Current())
			timer.Reset(retry)
			retry = min(2*retry, o.cfg.RetryMax)
			select { // kicks do not cut the backoff short
			case <-o.stop:
				return
			case <-timer.C:
			}
			continue
		}
		if p.Wake != 0 {
			wait := time.Duration(p.Wake-p.Now) * time.Millisecond
			timer.Reset(min(max(wait, time.Millisecond), o.cfg.HybridWindow))
		}
		select {
		case <-o.stop:
			return
		case <-o.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// logEvents logs rare events the hot path only counts.
func (o *Oracle) logEvents(steps, stalls uint64) (uint64, uint64) {
	if s := o.c.ClockStepsBack(); s != steps {
		o.log.Warn("oracle: wall clock stepped backward; values run ahead of it until it catches up",
			"steps_back_total", s, "current", o.c.Current())
		steps = s
	}
	if s := o.c.Stalls(); s != stalls {
		o.log.Debug("oracle: claims stalled at the mark", "stalls", s-stalls, "stalls_total", s)
		stalls = s
	}
	return steps, stalls
}
