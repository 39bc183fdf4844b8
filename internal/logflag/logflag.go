// Package logflag is the -log-level and -log-format flags of seqd's
// binaries and the slog.Logger they choose.
package logflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Config is what the flags set.
type Config struct {
	Level  slog.Level
	Format string // text or json
}

// ErrFormat is a -log-format other than text or json.
var ErrFormat = errors.New("logflag: -log-format must be text or json")

// Register adds -log-level (default info) and -log-format to fs.
func (c *Config) Register(fs *flag.FlagSet) { c.RegisterLevel(fs, slog.LevelInfo) }

// RegisterLevel adds -log-level, default def, and -log-format to fs.
func (c *Config) RegisterLevel(fs *flag.FlagSet, def slog.Level) {
	c.Format = "text"
	fs.TextVar(&c.Level, "log-level", def, "least severe log `level`: debug, info, warn or error")
	fs.StringVar(&c.Format, "log-format", "text", "log `format`: text (logfmt) or json")
}

// Logger returns the logger the flags chose, writing to w.
func (c *Config) Logger(w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: c.Level}
	switch c.Format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w, not %q", ErrFormat, c.Format)
}
