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

// checkName refuses a variable name longer than MaxIDBytes: a name is part
// of the store's key, and a tool may build one from what a model sent.
func checkName(name string) error {
	if len(name) > MaxIDBytes {
		return fmt.Errorf("session variable %s: the name is %d bytes; the limit is %d", shorten(name), len(name), MaxIDBytes)
	}
	return nil
}

func (s *session) Get(ctx context.Context, name string) (json.RawMessage, bool, error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
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
	if err := checkName(name); err != nil {
		return err
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
	if err := checkName(name); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	if err := s.st.DeleteVar(ctx, s.scope, name); err != nil {
		return fmt.Errorf("session variable %q: %w", name, err)
	}
	return nil
}
