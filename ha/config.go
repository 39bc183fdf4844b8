package ha

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Defaults filled by Config.validate.
const (
	DefaultPrefix      = "/seqd"
	DefaultTTL         = 3 * time.Second
	DefaultDialTimeout = 2 * time.Second
)

// Config configures a Node.
type Config struct {
	// Endpoints are the etcd client URLs. Required.
	Endpoints []string
	// Prefix roots every key seqd writes: Prefix+"/election/" holds the
	// campaign keys and Prefix+"/mark" the high-water mark. Default
	// DefaultPrefix.
	Prefix string
	// Name identifies this instance in logs. Default: Advertise.
	Name string
	// Advertise is the admin address standbys redirect clients to while
	// this instance leads. Required.
	Advertise string
	// TTL is the leadership lease, whole seconds (etcd's unit). Default
	// 3s. Failover after a leader dies takes about TTL.
	TTL time.Duration
	// Margin is how long before its lease can expire a leader stops
	// serving. It covers clock rate differences and the time between the
	// gate check and the claim. Default TTL/6, at least 100ms; it must be
	// below TTL/2.
	Margin time.Duration
	// KeepAliveEvery is how often the leadership lease is renewed.
	// Default TTL/6, at least 50ms.
	KeepAliveEvery time.Duration
	// DialTimeout bounds connecting to etcd and each etcd request made
	// outside a term (default 2s).
	DialTimeout time.Duration
	// Logger receives logs (default slog.Default()).
	Logger *slog.Logger
	// Init consents to a new group (-init): a term that finds no mark
	// under Prefix starts from zero. Without Init or Advance a missing
	// mark stops the Node (ErrNoMark): a mistyped Prefix or a wiped etcd
	// looks exactly like a new group, and starting from zero would serve
	// values again. Init never overwrites a mark: one that exists is
	// loaded.
	Init bool
	// Advance (-advance VALUE) makes every value served greater than
	// VALUE and consents to a missing mark: the recovery after losing it
	// (VALUE above every value ever served).
	Advance uint64
}

// validate checks c and fills defaults. It is the one place that does.
func (c *Config) validate() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: no etcd endpoints", ErrConfig)
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return fmt.Errorf("%w: empty etcd endpoint", ErrConfig)
		}
	}
	if c.Advertise == "" {
		return fmt.Errorf("%w: no advertised admin address", ErrConfig)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Prefix = strings.TrimRight(c.Prefix, "/")
	if c.Prefix == "" || !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("%w: prefix %q: want an absolute key path", ErrConfig, c.Prefix)
	}
	if c.Name == "" {
		c.Name = c.Advertise
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < time.Second || c.TTL%time.Second != 0 || c.TTL > time.Hour {
		return fmt.Errorf("%w: TTL %v: want whole seconds in [1s, 1h]", ErrConfig, c.TTL)
	}
	if c.Margin == 0 {
		c.Margin = max(c.TTL/6, 100*time.Millisecond)
	}
	if c.Margin < 0 || c.Margin >= c.TTL/2 {
		return fmt.Errorf("%w: Margin %v: want (0, TTL/2) with TTL %v", ErrConfig, c.Margin, c.TTL)
	}
	if c.KeepAliveEvery == 0 {
		c.KeepAliveEvery = max(c.TTL/6, 50*time.Millisecond)
	}
	if c.KeepAliveEvery <= 0 || c.KeepAliveEvery > c.TTL/3 {
		return fmt.Errorf("%w: KeepAliveEvery %v: want (0, TTL/3] with TTL %v", ErrConfig, c.KeepAliveEvery, c.TTL)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("%w: DialTimeout %v is negative", ErrConfig, c.DialTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

func (c *Config) electionPrefix() string { return c.Prefix + "/election" }
func (c *Config) markKey() string        { return c.Prefix + "/mark" }
func (c *Config) stateKey(name string) string {
	return c.Prefix + "/state/" + name
}
