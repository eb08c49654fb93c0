package tools

import (
	"context"
	"encoding/json"
	"errors"
)

// Session is the store of variables a batch's session_id gives its calls:
// JSON values that later calls of the same caller and session see, in this
// batch and later ones, on this replica and (with a shared store) others.
// Variables expire after the server's session TTL, counted from their last
// Set. A name is at most 256 bytes and a value at most 1 MiB; the server
// refuses more with an error.
type Session interface {
	// Get returns the variable's value; ok is false when it is not set.
	Get(ctx context.Context, name string) (value json.RawMessage, ok bool, err error)
	// Set sets the variable to value, which must be JSON.
	Set(ctx context.Context, name string, value json.RawMessage) error
	// Delete removes the variable; removing a missing one is no error.
	Delete(ctx context.Context, name string) error
}

// ErrNoSession is what a Session's methods return when the batch was sent
// without a session_id.
var ErrNoSession = errors.New("no session: the batch was sent without a session_id, so there are no session variables")

// Session returns the call's session. It is never nil: without a session
// (no session_id, or a handle made by NewCall) every method returns
// ErrNoSession.
func (c *Call) Session() Session {
	if c == nil || c.session == nil {
		return noSession{}
	}
	return c.session
}

// SetSession gives the call a session. The server calls it when the batch
// has a session_id; tests of a single tool may too.
func (c *Call) SetSession(s Session) { c.session = s }

type noSession struct{}

func (noSession) Get(context.Context, string) (json.RawMessage, bool, error) {
	return nil, false, ErrNoSession
}
func (noSession) Set(context.Context, string, json.RawMessage) error { return ErrNoSession }
func (noSession) Delete(context.Context, string) error               { return ErrNoSession }
