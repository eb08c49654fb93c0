package surfacetest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// TestEngineAsASurface runs the suite against the engine called in
// process, as a surface calls it: it checks the suite itself, and shows
// the least an adapter does.
func TestEngineAsASurface(t *testing.T) {
	t.Parallel()
	surfacetest.Run(t, func(t *testing.T, cfg surfacetest.Config) surfacetest.Surface {
		s := &inProcess{e: cfg.Engine, reg: cfg.Registry, callers: map[string]string{}}
		for _, c := range cfg.Callers {
			s.callers[c.Token] = c.Name
		}
		t.Cleanup(cfg.Engine.Drain)
		return s
	})
}

// inProcess is a surface without a transport: its requests are function
// calls, its credentials looked up in a map. It lacks a message limit, which
// only a transport has.
type inProcess struct {
	e       *engine.Engine
	reg     *tools.Registry
	callers map[string]string // token → name
}

var errUnauthenticated = errors.New("unauthenticated")

func (s *inProcess) authenticate(ctx context.Context, c surfacetest.Caller) (context.Context, error) {
	name, ok := s.callers[c.Token]
	if !ok || c.Token == "" {
		return nil, errUnauthenticated
	}
	return engine.WithCaller(ctx, name), nil
}

func (s *inProcess) Tools(ctx context.Context, c surfacetest.Caller) ([]*toolwirev1.Tool, error) {
	ctx, err := s.authenticate(ctx, c)
	if err != nil {
		return nil, err
	}
	return s.e.Tools(ctx, s.reg.Snapshot()), nil
}

func (s *inProcess) Batch(ctx context.Context, c surfacetest.Caller, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error) {
	ctx, err := s.authenticate(ctx, c)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var events []*toolwirev1.ExecuteBatchResponse
	err = s.e.Run(ctx, s.reg.Snapshot(), req, engine.SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
		return nil
	}))
	mu.Lock()
	defer mu.Unlock()
	return events, err
}

func (s *inProcess) Call(ctx context.Context, c surfacetest.Caller, sessionID string, call *toolwirev1.ToolCall) (*toolwirev1.CallResult, error) {
	ctx, err := s.authenticate(ctx, c)
	if err != nil {
		return nil, err
	}
	return s.e.Call(ctx, s.reg.Snapshot(), call, sessionID)
}

func (s *inProcess) Code(err error) surfacetest.Code {
	if errors.Is(err, errUnauthenticated) {
		return surfacetest.Unauthenticated
	}
	switch engine.CodeOf(err) {
	case engine.OK:
		return surfacetest.OK
	case engine.Canceled:
		return surfacetest.Canceled
	case engine.InvalidArgument:
		return surfacetest.InvalidArgument
	case engine.DeadlineExceeded:
		return surfacetest.DeadlineExceeded
	case engine.ResourceExhausted:
		return surfacetest.ResourceExhausted
	case engine.Unavailable:
		return surfacetest.Unavailable
	case engine.Internal:
		return surfacetest.Internal
	case engine.Aborted:
		return surfacetest.Aborted
	}
	return surfacetest.Unknown
}

func (s *inProcess) Lacks() surfacetest.Lacks { return surfacetest.Lacks{MessageLimit: true} }
