package reload

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultInterval is how often a Watcher polls its files.
const DefaultInterval = time.Second

// Source is a secret read from files. Reload re-reads them and, only if
// every one reads and parses, swaps the secret in place; on an error the
// old secret stays in force.
type Source interface {
	Name() string    // what it is, for logs and the metric's secret label ("tokens", "tls")
	Files() []string // the files it reads
	Reload() error
}

// Watcher reloads its Sources on a signal and when their files change.
type Watcher struct {
	log            *slog.Logger
	reloads, fails *prometheus.CounterVec
	watched        []*watched

	mu sync.Mutex // serialises reloads: a signal and a poll at once
}

type watched struct {
	src        Source
	ok, failed prometheus.Counter
	seen       []sig // the files' signatures at the last poll
	applied    []sig // ... at the last reload (or start)
}

// New returns a Watcher over srcs whose metrics are named
// <namespace>_secret_reloads_total and <namespace>_secret_reload_errors_total,
// labelled by the Source's Name. The files' current state counts as
// loaded: the caller read them just before.
func New(namespace string, log *slog.Logger, srcs ...Source) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{log: log.With("component", "secret-reload"),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: namespace + "_secret_reloads_total",
			Help: "Secret files (tokens, TLS key pair and CA) re-read and put in force, by secret."}, []string{"secret"}),
		fails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: namespace + "_secret_reload_errors_total",
			Help: "Secret reloads that failed (unreadable file, bad PEM, mismatched key, empty token file): the old secret stays in force."}, []string{"secret"}),
	}
	for _, s := range srcs {
		if s == nil {
			continue
		}
		x := &watched{src: s, ok: w.reloads.WithLabelValues(s.Name()), failed: w.fails.WithLabelValues(s.Name())}
		x.seen = stat(s.Files())
		x.applied = x.seen
		w.watched = append(w.watched, x)
	}
	return w
}

// Collectors are the reload counters.
func (w *Watcher) Collectors() []prometheus.Collector {
	return []prometheus.Collector{w.reloads, w.fails}
}

// ReloadAll reloads every Source, changed or not (SIGHUP), and returns
// how many failed.
func (w *Watcher) ReloadAll() (failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.watched {
		// Stat before reading: a write after the stat changes the
		// signature, and the next poll reads the file again.
		x.seen = stat(x.src.Files())
		x.applied = x.seen
		if !w.reload(x, "signal") {
			failed++
		}
	}
	return failed
}

// Poll reloads each Source whose files changed since it was last loaded
// and then stayed the same for one poll, so that a file caught in the
// middle of a write (or a key pair with one of its two files replaced)
// is not read. A Source whose reload failed is tried again only once its
// files change again: one error logged per bad version.
func (w *Watcher) Poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.watched {
		cur := stat(x.src.Files())
		if !sameSigs(cur, x.seen) {
			x.seen = cur // changing: wait until it settles
			continue
		}
		if sameSigs(cur, x.applied) {
			continue
		}
		x.applied = cur
		w.reload(x, "file change")
	}
}

func (w *Watcher) reload(x *watched, why string) bool {
	if err := x.src.Reload(); err != nil {
		x.failed.Inc()
		w.log.Error("secret reload failed", "kept", "the previous secret stays in force", "secret", x.src.Name(),
			"trigger", why, "files", x.src.Files(), "err", err)
		return false
	}
	x.ok.Inc()
	w.log.Info("secret reloaded", "secret", x.src.Name(), "trigger", why, "files", x.src.Files())
	return true
}

// Run polls every interval (DefaultInterval if not positive) and reloads
// everything on each receive from signals (nil: none) until ctx is done.
func (w *Watcher) Run(ctx context.Context, interval time.Duration, signals <-chan os.Signal) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-signals:
			w.log.Info("reloading secrets", "signal", s.String(), "secrets", len(w.watched))
			w.ReloadAll()
		case <-t.C:
			w.Poll()
		}
	}
}

// Start runs Run in a goroutine and returns the function that stops it
// and waits for it.
func (w *Watcher) Start(ctx context.Context, interval time.Duration, signals <-chan os.Signal) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, interval, signals)
	}()
	return func() {
		cancel()
		<-done
	}
}

// sig is what a poll compares of a file: a missing file has ok false.
type sig struct {
	ok       bool
	size     int64
	mod, chg time.Time // modification and (where known) status change
	dev, ino uint64
}

func stat(files []string) []sig {
	out := make([]sig, len(files))
	for i, f := range files {
		fi, err := os.Stat(f) // follows symlinks: a Kubernetes secret's ..data swap changes the inode
		if err != nil {
			continue
		}
		out[i] = sig{ok: true, size: fi.Size(), mod: fi.ModTime()}
		out[i].chg, out[i].dev, out[i].ino = sysStat(fi)
	}
	return out
}

func sameSigs(a, b []sig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ok != b[i].ok || a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) || !a[i].chg.Equal(b[i].chg) ||
			a[i].dev != b[i].dev || a[i].ino != b[i].ino {
			return false
		}
	}
	return true
}
