package engine

import "context"

// Identity is who a request comes from, as its surface's authentication
// proved it. Everything that scopes state or permissions by caller
// (idempotency keys, tool permissions, per-caller limits, session
// variables, telemetry) reads ID; what decides by more than a name (a
// policy over groups or claims) reads the rest. An Identity is shared, not
// copied: nothing may change it once it is in a context.
type Identity struct {
	// ID names the caller: a token's name, a client certificate's
	// identity, a verified JWT's caller claim. "" is the anonymous caller,
	// everyone's identity when authentication is off.
	ID string
	// Groups are the groups the caller belongs to, as the configuration or
	// the credentials say; nil when none.
	Groups []string
	// Claims are a verified JWT's claims; nil for other credentials.
	Claims map[string]any
	// Method is how the caller authenticated: MethodToken,
	// MethodCertificate, MethodJWT, or "" for the anonymous caller.
	Method string
}

// How an Identity was proved (Identity.Method).
const (
	MethodToken       = "token"       // a static bearer token
	MethodCertificate = "certificate" // a TLS client certificate
	MethodJWT         = "jwt"         // a bearer JWT from an OIDC issuer
)

// anonymous is the identity of a context that carries none.
var anonymous = &Identity{}

type callerKey struct{}

// WithIdentity returns a context carrying id, the identity of a request's
// caller. A surface's authentication sets it.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// IdentityFrom returns the identity WithIdentity (or WithCaller) stored in
// ctx, or the anonymous caller's when there is none; never nil.
func IdentityFrom(ctx context.Context) *Identity {
	if id, ok := ctx.Value(callerKey{}).(*Identity); ok && id != nil {
		return id
	}
	return anonymous
}

// WithCaller returns a context carrying a caller known by name alone:
// WithIdentity with an Identity of that ID and nothing else.
func WithCaller(ctx context.Context, id string) context.Context {
	return WithIdentity(ctx, &Identity{ID: id})
}

// CallerFrom returns the ID of the caller in ctx, or "" for an anonymous
// caller (a surface without authentication).
func CallerFrom(ctx context.Context) string {
	return IdentityFrom(ctx).ID
}
