package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/tools"
)

// maxSessionValue bounds one session variable's value, so a tool cannot fill
// a shared store by accident.
const maxSessionValue = 1 << 20

// session is a batch's session: its variables in the store (Deps.Vars),
// scoped by the caller and the session ID (sessionScope; see vars.go).
type session struct {
	st    store.Vars
	scope string
	ttl   time.Duration
}

// session returns the batch's session, or nil when it has no session_id.
func (b *batch) session(ctx context.Context) tools.Session {
	id := b.req.GetSessionId()
	if id == "" {
		return nil
	}
	return &session{st: b.e.deps.Vars, scope: sessionScope(CallerFrom(ctx), id), ttl: b.e.cfg.SessionTTL}
}

func (s *session) Get(ctx context.Context, name string) (json.RawMessage, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	v, ok, err := s.st.GetVar(ctx, s.scope, name)
	if err != nil {
		return nil, false, fmt.Errorf("session variable %q: %w", name, err)
	}
	return v, ok, nil
}

func (s *session) Set(ctx context.Context, name string, value json.RawMessage) error {
	if name == "" {
		return errors.New("session variable: the name is empty")
	}
	if len(value) > maxSessionValue {
		return fmt.Errorf("session variable %q: the value is %d bytes; the limit is %d", name, len(value), maxSessionValue)
	}
	if !json.Valid(value) {
		return fmt.Errorf("session variable %q: the value is not JSON", name)
	}
	ctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	if err := s.st.SetVar(ctx, s.scope, name, value, s.ttl); err != nil {
		return fmt.Errorf("session variable %q: %w", name, err)
	}
	return nil
}

func (s *session) Delete(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	if err := s.st.DeleteVar(ctx, s.scope, name); err != nil {
		return fmt.Errorf("session variable %q: %w", name, err)
	}
	return nil
}
