package auth

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What the open methods may hold. grpc-go reads a request whole, up to the
// server's one receive limit (max_message_bytes, 4 MiB), before a method's
// handler runs, and the open methods are read without credentials: 200
// health checks on one connection, each announcing 4 MiB and sent slowly,
// held 953 MB of a server whose every other method refuses such a client
// as its stream opens (Admit). Their requests are a few bytes, so the
// server bounds what they may have in flight instead:
//
//   - a health check's request (Check, List, Watch's one message) is read
//     within OpenReadTimeout, and at most OpenHealthReads are being read at
//     once; one more is refused RESOURCE_EXHAUSTED as its stream opens. A
//     check's request comes with its headers, so it is read in
//     microseconds and the bound is met only by a client that sends slowly.
//   - reflection streams without valid credentials are at most
//     OpenReflections at once, each for its whole life (its requests are
//     read as they come, and one being read cannot be told from one not yet
//     sent); with valid credentials they are not counted.
//
// Together what unauthenticated clients can make the server hold is
// (OpenHealthReads + OpenReflections) × max_message_bytes, 96 MiB at the
// defaults, where it had no bound. Probes belong on health_listen, which
// no client outside reaches.
const (
	OpenHealthReads = 16
	OpenReflections = 8
	OpenReadTimeout = 10 * time.Second
)

// openGate holds the bounds of the open methods for one Admit.
type openGate struct {
	health, reflection chan struct{} // semaphores
	readTimeout        time.Duration
}

func newOpenGate(health, reflection int, readTimeout time.Duration) *openGate {
	return &openGate{health: make(chan struct{}, health), reflection: make(chan struct{}, reflection), readTimeout: readTimeout}
}

var errSlowRequest = errors.New("the request was not received within the time the open methods allow")

func isHealth(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// admitHealth takes a health check's read slot, or refuses the stream; the
// slot is given back once the request is read (requestRead, called by the
// interceptors), or once the stream ends before it was.
func (o *openGate) admitHealth(ctx context.Context) (context.Context, error) {
	select {
	case o.health <- struct{}{}:
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "%d health checks are being received at once, the most the server reads without credentials; try again", cap(o.health))
	}
	inner, cancel := context.WithCancelCause(ctx)
	r := &openRead{Context: inner}
	var once sync.Once
	release := func() { once.Do(func() { <-o.health }) }
	stopAfter := context.AfterFunc(inner, release)
	timer := time.AfterFunc(o.readTimeout, func() { cancel(errSlowRequest) })
	r.read = func() {
		timer.Stop()
		stopAfter()
		release()
	}
	return r, nil
}

// admitReflection takes a reflection slot for the stream's life, or
// refuses it.
func (o *openGate) admitReflection(ctx context.Context) (context.Context, error) {
	select {
	case o.reflection <- struct{}{}:
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "%d reflection streams without credentials are open, the most the server allows; close one, or send credentials", cap(o.reflection))
	}
	context.AfterFunc(ctx, func() { <-o.reflection }) // the transport ends ctx with the stream
	return ctx, nil
}

// openRead is a health check's transport context until its request is
// read: one its read timeout ends.
type openRead struct {
	context.Context
	read func() // the request was read: stop the timeout, give back the slot
}

type openReadKey struct{}

func (r *openRead) Value(key any) any {
	if key == (openReadKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// Err reports a request not read in time as past a deadline, which the
// transport sends as DEADLINE_EXCEEDED; CANCELLED would say the client
// cancelled.
func (r *openRead) Err() error {
	err := r.Context.Err()
	if err != nil && errors.Is(context.Cause(r.Context), errSlowRequest) {
		return context.DeadlineExceeded
	}
	return err
}

// requestRead tells the open gate, if it holds ctx's stream, that its
// request has been read.
func requestRead(ctx context.Context) {
	if r, ok := ctx.Value(openReadKey{}).(*openRead); ok {
		r.read()
	}
}

// firstRead is a server stream whose first message, once received, is
// the request the open gate waits for (a health Watch's).
type firstRead struct {
	grpc.ServerStream
	once sync.Once
}

func (s *firstRead) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.once.Do(func() { requestRead(s.Context()) })
	return err
}
