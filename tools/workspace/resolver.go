package workspace

import (
	"context"
	"errors"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// Resolver gives each call the workspace it works in. A *Workspace is a
// Resolver that gives every call itself; Sessions gives each session a
// folder of its own.
type Resolver interface {
	// Resolve returns the call's workspace and a function the call runs
	// when it is done with it; until then the workspace stays open and its
	// folder in place. The error is one the model can read: ErrNoSession,
	// or why the folder could not be made.
	Resolve(call *tools.Call) (ws *Workspace, release func(), err error)
}

// Resolve gives every call w itself.
func (w *Workspace) Resolve(*tools.Call) (*Workspace, func(), error) {
	return w, func() {}, nil
}

// ErrNoSession is the error of a call without a session_id to a server that
// gives each session its own workspace.
var ErrNoSession = errors.New("a session is required: this server gives each session its own workspace, so send the batch with a session_id")

// Handler returns a tool handler that resolves the call's workspace with r,
// runs h in it, and releases it when h returns. A call that cannot have a
// workspace gets an error result: INVALID_ARGUMENTS without a session, a
// tool error otherwise.
func Handler(r Resolver, h func(ctx context.Context, call *tools.Call, ws *Workspace) (*tools.Result, error)) tools.Handler {
	return func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
		return in(r, call, func(ws *Workspace) (*tools.Result, error) { return h(ctx, call, ws) })
	}
}

// Typed is Handler for a tool built with tools.Typed: h gets the decoded
// arguments too. Its Out is any, so the tool declares no output schema and
// its result is the one h returns.
func Typed[In any](r Resolver, h func(ctx context.Context, call *tools.Call, ws *Workspace, in In) (*tools.Result, error)) tools.TypedHandler[In, any] {
	return func(ctx context.Context, call *tools.Call, args In) (*tools.Result, any, error) {
		res, err := in(r, call, func(ws *Workspace) (*tools.Result, error) { return h(ctx, call, ws, args) })
		return res, nil, err
	}
}

// in runs h in the call's workspace; see Handler.
func in(r Resolver, call *tools.Call, h func(ws *Workspace) (*tools.Result, error)) (*tools.Result, error) {
	ws, release, err := r.Resolve(call)
	if err != nil {
		res := tools.Errorf("%v", err)
		if errors.Is(err, ErrNoSession) {
			res.ErrorKind = int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS)
		}
		return res, nil
	}
	defer release()
	return h(ws)
}
