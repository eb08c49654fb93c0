package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/store"
)

// breaker stops sending to a Redis that keeps failing to answer: after
// Failures consecutive commands failed for want of an answer (a timeout, a
// refused or broken connection), it is open for Cooldown, and every command
// fails at once with store.ErrUnavailable instead of waiting its deadline.
// Then one command at a time is let through as a probe: its success closes
// the breaker, its failure opens it for another Cooldown. Replies from the
// server (errors included) are answers and count as successes.
//
// It is a go-redis hook, so every command the store sends passes it: Lua
// scripts (EVALSHA and its EVAL fallback), polls, XREAD. A breaker library
// (sony/gobreaker) would add generations and counts we do not use.
type breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time

	mu      sync.Mutex
	failed  int       // consecutive failures
	openTil time.Time // while now is before it, commands fail at once
	probing bool      // a probe is in flight after the cool-down
}

var _ goredis.Hook = (*breaker)(nil)

func newBreaker(failures int, cooldown time.Duration) *breaker {
	return &breaker{failures: failures, cooldown: cooldown, now: time.Now}
}

// errOpen is what a command gets while the breaker is open.
var errOpen = fmt.Errorf("redis store: %w", store.ErrUnavailable)

// allow tells whether a command may go to the server now; probe is set
// when it is the one probe after a cool-down.
func (b *breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed < b.failures {
		return true, false
	}
	if b.now().Before(b.openTil) || b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// done records a command's outcome.
func (b *breaker) done(err error, probe bool) {
	unanswered := unanswered(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if errors.Is(err, store.ErrUnavailable) {
		// A breaker's own refusal says nothing of the server: it reaches
		// here when a command's connection handshake (whose commands pass
		// the same hooks) was refused, and must not count as an answer
		// that closes the breaker again.
		return
	}
	if !unanswered {
		b.failed = 0
		return
	}
	b.failed++
	if b.failed >= b.failures {
		b.openTil = b.now().Add(b.cooldown)
	}
}

// unanswered tells whether err means the server did not answer: a
// timeout (its own or the caller's deadline), or a connection refused,
// reset or closed. A cancelled caller, a reply (even an error reply) and
// redis.Nil are not.
func unanswered(err error) bool {
	if err == nil || errors.Is(err, goredis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var re goredis.Error
	if errors.As(err, &re) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// DialHook implements goredis.Hook.
func (b *breaker) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (b *breaker) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if b.nested(ctx) {
			return next(ctx, cmd)
		}
		ok, probe := b.allow()
		if !ok {
			cmd.SetErr(errOpen)
			return errOpen
		}
		err := next(b.within(ctx), cmd)
		b.done(err, probe)
		return err
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (b *breaker) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if b.nested(ctx) {
			return next(ctx, cmds)
		}
		ok, probe := b.allow()
		if !ok {
			for _, c := range cmds {
				c.SetErr(errOpen)
			}
			return errOpen
		}
		err := next(b.within(ctx), cmds)
		b.done(err, probe)
		return err
	}
}

// admittedKey marks the context of a command a breaker let through.
type admittedKey struct{}

// within returns ctx marked as a command b let through. go-redis sends a
// new connection's handshake (HELLO, CLIENT SETINFO, …) through the same
// hooks, on the context of the command that needs the connection: those
// are part of that command, counted with it, and never refused on their
// own (a probe's handshake refused because a probe is in flight would
// keep the breaker open for good).
func (b *breaker) within(ctx context.Context) context.Context {
	return context.WithValue(ctx, admittedKey{}, b)
}

// nested tells whether ctx is a command's that b let through.
func (b *breaker) nested(ctx context.Context) bool {
	return ctx.Value(admittedKey{}) == b
}
