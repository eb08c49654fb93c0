package service

import (
	"context"
	"log/slog"

	"github.com/toolwire/toolwire/engine"
)

// Permissions decides which tools a caller may see and call; see
// engine.Permissions.
type Permissions = engine.Permissions

// WithCaller returns a context carrying the authenticated identity of an
// RPC's caller, as engine.WithCaller does; the authentication interceptor
// sets it.
func WithCaller(ctx context.Context, identity string) context.Context {
	return engine.WithCaller(ctx, identity)
}

// Caller returns the identity WithCaller stored in ctx, or "" for an
// anonymous caller (a server without authentication).
func Caller(ctx context.Context) string { return engine.CallerFrom(ctx) }

// LogHandler wraps h so that records logged with a context carry its trace
// and the batch and call it belongs to; see engine.LogHandler.
func LogHandler(h slog.Handler) slog.Handler { return engine.LogHandler(h) }
