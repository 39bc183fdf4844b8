package oracle

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/seqd/seqd/spec"
)

// Defaults filled by Config.validate.
const (
	DefaultHybridWindow  = 3 * time.Second
	DefaultCounterWindow = 1 << 20
	DefaultMaxBatch      = 1 << 16
	DefaultSaveTimeout   = 5 * time.Second
	DefaultRetryMin      = 10 * time.Millisecond
	DefaultRetryMax      = time.Second
)

// Config configures an Oracle. The zero value plus Dir (or Store) is a
// working hybrid oracle.
type Config struct {
	// Format of the values; zero means spec.FormatHybrid.
	Format spec.Format
	// Store persists the mark. If nil, Open opens a FileStore in Dir.
	Store Store
	// Dir is the data directory for the default FileStore.
	Dir string

	// HybridWindow is how far ahead of the clock a hybrid mark is saved
	// (default 3s; at least 1ms, whole milliseconds).
	HybridWindow time.Duration
	// CounterWindow is how many values ahead a counter mark is saved
	// (default 1<<20; at least 2*MaxBatch).
	CounterWindow uint64
	// MaxBatch is the largest n a Claim accepts (default 1<<16).
	MaxBatch int
	// Floor makes the first value greater than Floor even if the persisted
	// mark is lower, or missing (the store reports ErrNoMark): the
	// recovery path after losing the mark file. It must be above every
	// value the oracle ever served.
	Floor uint64
	// Init marks a new deployment: a missing Dir is created and a missing
	// mark file is taken as mark 0. Without it (and without a Floor) both
	// are errors (ErrDataDir, ErrNoMark) that name the path, because a
	// missing mark is as likely a lost or unmounted volume as a first
	// start. A mark file that exists is always loaded, Init or not: an
	// empty or damaged one is an error (ErrCorrupt).
	Init bool

	// Clock returns Unix milliseconds (default: the wall clock).
	Clock func() int64
	// SaveTimeout bounds one Store.Save (default 5s).
	SaveTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failed save
	// (defaults 10ms and 1s).
	RetryMin, RetryMax time.Duration
	// Logger receives the oracle's logs (default slog.Default()).
	Logger *slog.Logger
	// Gate, when set, is asked before every claim and must return nil for
	// the claim to proceed. High availability sets it to the leadership
	// lease (ha.Term.Gate): a leader whose lease may have run out hands
	// out nothing. It is called on the hot path: it must be cheap, must
	// not block, and should return a preallocated error.
	Gate func() error
}

// validate checks c and fills defaults. It is the one place that does.
func (c *Config) validate() error {
	if c.Format == 0 {
		c.Format = spec.FormatHybrid
	}
	if !c.Format.Valid() {
		return fmt.Errorf("%w: format %d", ErrConfig, c.Format)
	}
	if c.Store == nil && c.Dir == "" {
		return fmt.Errorf("%w: need a Store or a Dir", ErrConfig)
	}
	if c.HybridWindow == 0 {
		c.HybridWindow = DefaultHybridWindow
	}
	if c.HybridWindow < time.Millisecond || c.HybridWindow%time.Millisecond != 0 || c.HybridWindow > time.Hour {
		return fmt.Errorf("%w: HybridWindow %v: want whole milliseconds in [1ms, 1h]", ErrConfig, c.HybridWindow)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatch < 1 || c.MaxBatch > 1<<30 {
		return fmt.Errorf("%w: MaxBatch %d: want [1, 1<<30]", ErrConfig, c.MaxBatch)
	}
	if c.CounterWindow == 0 {
		c.CounterWindow = max(DefaultCounterWindow, 2*uint64(c.MaxBatch))
	}
	if c.CounterWindow < 2*uint64(c.MaxBatch) || c.CounterWindow > 1<<62 {
		return fmt.Errorf("%w: CounterWindow %d: want [2*MaxBatch, 1<<62] (MaxBatch %d)", ErrConfig, c.CounterWindow, c.MaxBatch)
	}
	if c.Format == spec.FormatHybrid && uint64(c.HybridWindow/time.Millisecond)<<spec.HybridLogicalBits < 2*uint64(c.MaxBatch) {
		return fmt.Errorf("%w: HybridWindow %v is too small for MaxBatch %d", ErrConfig, c.HybridWindow, c.MaxBatch)
	}
	if c.Floor >= limit {
		return fmt.Errorf("%w: Floor %d: %w", ErrConfig, c.Floor, ErrRange)
	}
	if c.Clock == nil {
		c.Clock = wallClock
	}
	if c.SaveTimeout == 0 {
		c.SaveTimeout = DefaultSaveTimeout
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.SaveTimeout < 0 || c.RetryMin < 0 || c.RetryMax < c.RetryMin {
		return fmt.Errorf("%w: SaveTimeout %v, RetryMin %v, RetryMax %v", ErrConfig, c.SaveTimeout, c.RetryMin, c.RetryMax)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// window returns the mark window in values.
func (c *Config) window() uint64 {
	if c.Format == spec.FormatCounter {
		return c.CounterWindow
	}
	return uint64(c.HybridWindow/time.Millisecond) << spec.HybridLogicalBits
}

func wallClock() int64 { return time.Now().UnixMilli() }
