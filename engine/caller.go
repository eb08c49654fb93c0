package engine

import "context"

type callerKey struct{}

// WithCaller returns a context carrying the authenticated identity of a
// batch's caller. A surface's authentication sets it; everything that
// scopes state or permissions by caller (idempotency keys, tool
// permissions, per-caller limits, session variables) reads it with
// CallerFrom.
func WithCaller(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, callerKey{}, identity)
}

// CallerFrom returns the identity WithCaller stored in ctx, or "" for an
// anonymous caller (a surface without authentication).
func CallerFrom(ctx context.Context) string {
	id, _ := ctx.Value(callerKey{}).(string)
	return id
}
