package service

import "context"

type callerKey struct{}

// WithCaller returns a context carrying the authenticated identity of an
// RPC's caller. The authentication interceptor sets it; everything that
// scopes state or permissions by caller (idempotency keys, tool
// permissions, per-caller limits) reads it with Caller.
func WithCaller(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, callerKey{}, identity)
}

// Caller returns the identity WithCaller stored in ctx, or "" for an
// anonymous caller (a server without authentication).
func Caller(ctx context.Context) string {
	id, _ := ctx.Value(callerKey{}).(string)
	return id
}
