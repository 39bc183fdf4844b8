// Package zapslog bridges zap, the logger of etcd's client, into slog:
// etcd's warnings (a lost member, a slow request, a retried lease) then
// reach seqd's log in its level and format instead of being dropped.
package zapslog

import (
	"context"
	"log/slog"
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Logger returns a zap.Logger whose entries go to l: zap's levels map to
// slog's (DPanic, Panic and Fatal to Error), fields to attributes, and
// the logger's name to the attribute "logger". Entries below l's level
// cost one Enabled call.
func Logger(l *slog.Logger) *zap.Logger { return zap.New(&core{l: l}) }

type core struct {
	l      *slog.Logger
	fields []zapcore.Field
}

var _ zapcore.Core = (*core)(nil)

func level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (c *core) Enabled(l zapcore.Level) bool { return c.l.Enabled(context.Background(), level(l)) }

func (c *core) With(fs []zapcore.Field) zapcore.Core {
	return &core{l: c.l, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.l.LogAttrs(context.Background(), level(e.Level), e.Message, attrs...)
	return nil
}

func (c *core) Sync() error { return nil }
