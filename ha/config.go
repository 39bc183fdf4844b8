package ha

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/seqd/seqd/spec"
)

// Defaults filled by Config.validate.
const (
	DefaultPrefix      = "/seqd"
	DefaultTTL         = 3 * time.Second
	DefaultDialTimeout = 2 * time.Second
	// DefaultBeat and DefaultServeLease give failover well under a
	// second: a standby deposes a leader that has not renewed its
	// serving lease for Config.TakeoverAfter (about 430 ms).
	DefaultBeat       = 100 * time.Millisecond
	DefaultServeLease = 400 * time.Millisecond
	// MaxDrift bounds how far the rate of any instance's monotonic clock
	// may differ from real time, as a fraction (1%: 10,000 ppm, twenty
	// times what NTP lets a clock slew). The takeover wait is stretched
	// by it: see Config.TakeoverAfter and doc.go.
	MaxDrift = 0.01
	// TakeoverSlack is added to the takeover wait on top of what the
	// argument in doc.go needs: a cushion, not a term of the proof.
	TakeoverSlack = 20 * time.Millisecond
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
	// Beat is how often the leader renews its serving lease: a
	// heartbeat key written in a transaction guarded by the term's
	// election key. Default DefaultBeat; negative turns the serving
	// lease off, and with it fast failover: a dead leader is then
	// replaced only when etcd expires its lease (about TTL), as before.
	Beat time.Duration
	// ServeLease is how long after sending an answered heartbeat the
	// leader may serve (Term.Gate). Standbys depose a leader whose
	// heartbeat has not moved for TakeoverAfter on their own clock.
	// Default DefaultServeLease; at least 2×Beat, at most TTL/2.
	ServeLease time.Duration
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
	// DataDir (-data), when set, holds this instance's witness
	// (WitnessDirName): the highest group mark it has seen in etcd,
	// loaded, saved or watched. A term that loads a mark below it refuses
	// to serve (ErrMarkBehind: a restored etcd snapshot, another group's
	// prefix) unless Advance (or, in hybrid format, the clock) is above
	// it. It is created when missing: a fresh directory trusts etcd's
	// mark, as an instance without DataDir always does. One process per
	// directory (locked).
	DataDir string
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
	if c.Beat == 0 {
		c.Beat = DefaultBeat
	}
	if c.Beat > 0 {
		if c.ServeLease == 0 {
			c.ServeLease = DefaultServeLease
		}
		if c.Beat < 10*time.Millisecond {
			return fmt.Errorf("%w: Beat %v: want at least 10ms", ErrConfig, c.Beat)
		}
		if c.ServeLease < 2*c.Beat || c.ServeLease > c.TTL/2 {
			return fmt.Errorf("%w: ServeLease %v: want [2×Beat, TTL/2] with Beat %v and TTL %v", ErrConfig, c.ServeLease, c.Beat, c.TTL)
		}
	} else {
		c.Beat, c.ServeLease = 0, 0
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

// FastFailover reports whether the serving lease is on (Beat > 0).
func (c Config) FastFailover() bool { return c.Beat > 0 }

// TakeoverAfter is how long a standby waits, on its own monotonic clock,
// after it saw the leader's latest heartbeat before it deposes the
// leader: long enough that the leader's serving lease (ServeLease,
// counted from before the heartbeat was sent) and the last answer's
// residence (spec.MaxResidence) have run out on the leader's clock, even
// if the two clocks' rates differ by MaxDrift each way. 0 when the
// serving lease is off.
func (c Config) TakeoverAfter() time.Duration {
	if c.Beat <= 0 {
		return 0
	}
	held := float64(c.ServeLease + spec.MaxResidence)
	return time.Duration(held*(1+MaxDrift)/(1-MaxDrift)) + 1 + TakeoverSlack
}

func (c *Config) electionPrefix() string { return c.Prefix + "/election" }
func (c *Config) markKey() string        { return c.Prefix + "/mark" }
func (c *Config) beatKey() string        { return c.Prefix + "/beat" }
func (c *Config) probeKey() string       { return c.Prefix + "/probe/" + c.Advertise }
func (c *Config) stateKey(name string) string {
	return c.Prefix + "/state/" + name
}
