package mcpserve

import (
	"context"
	"log/slog"
)

// The go-sdk logs at INFO what a server does for every request and session
// ("server session connected", "session initialized", "server session
// disconnected", …: three lines for each stateless request, four for each
// session), which at INFO would bury the server's own log. Its lines below
// WARN go to the logger at DEBUG; its warnings and errors keep their level.

// quiet is a slog.Handler that writes records below WARN at DEBUG.
type quiet struct{ h slog.Handler }

// sdkLogger is log for the go-sdk: its lines below WARN at DEBUG.
func sdkLogger(log *slog.Logger) *slog.Logger { return slog.New(quiet{log.Handler()}) }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, demote(l))
}

func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return q.h.Handle(ctx, r)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.h.WithAttrs(as)} }

func (q quiet) WithGroup(name string) slog.Handler { return quiet{q.h.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l > slog.LevelDebug && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}
