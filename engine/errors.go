package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Code classifies an error Run returns, for a surface to map to its wire
// format at its edge (the gRPC surface maps each to the gRPC code of the
// same name). What a model must see is never an error: it is a result.
type Code int

// The codes an Engine returns. Their names are gRPC's, whose meanings they
// keep.
const (
	OK Code = iota
	Canceled
	Unknown
	InvalidArgument
	DeadlineExceeded
	ResourceExhausted
	Unavailable
	Internal
	NotFound
	PermissionDenied
	Unauthenticated
	Aborted
)

var codeNames = [...]string{
	OK:                "OK",
	Canceled:          "Canceled",
	Unknown:           "Unknown",
	InvalidArgument:   "InvalidArgument",
	DeadlineExceeded:  "DeadlineExceeded",
	ResourceExhausted: "ResourceExhausted",
	Unavailable:       "Unavailable",
	Internal:          "Internal",
	NotFound:          "NotFound",
	PermissionDenied:  "PermissionDenied",
	Unauthenticated:   "Unauthenticated",
	Aborted:           "Aborted",
}

func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Error is an error with a Code: what the caller of a batch must fix
// (InvalidArgument), retry later (ResourceExhausted, Unavailable), or what
// ended it (Canceled, DeadlineExceeded). Message is meant for the caller
// and is sent as it is. Like connect-go's Error it may carry details,
// protobuf messages a client can act on (a google.rpc.RetryInfo saying
// when to retry, an ErrorInfo naming a rule), which each surface sends in
// its protocol's way, and a cause, the error underneath, for errors.Is and
// errors.As on the server's side (it is never sent).
type Error struct {
	Code    Code
	Message string
	details []proto.Message
	cause   error
}

// NewError returns an *Error of code whose message is underlying's text
// and whose cause (Unwrap) is underlying.
func NewError(code Code, underlying error) *Error {
	return &Error{Code: code, Message: underlying.Error(), cause: underlying}
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Message }

// Unwrap returns the error underneath e, nil when there is none.
func (e *Error) Unwrap() error { return e.cause }

// AddDetail adds a detail to e: a protobuf message the client can act on,
// sent after the ones added before it.
func (e *Error) AddDetail(m proto.Message) *Error {
	e.details = append(e.details, m)
	return e
}

// Details returns e's details, in the order they were added.
func (e *Error) Details() []proto.Message { return e.details }

// RetryAfter adds a google.rpc.RetryInfo detail to e: the client should
// not retry before delay has passed.
func (e *Error) RetryAfter(delay time.Duration) *Error {
	return e.AddDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

// RetryDelay returns the delay of the first google.rpc.RetryInfo among
// err's details, and whether there is one.
func RetryDelay(err error) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false
	}
	for _, d := range e.details {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// errorf returns an *Error with a formatted message.
func errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns err's code: OK for nil, an *Error's own, Canceled or
// DeadlineExceeded for the context package's errors, else Unknown (a
// sink's error, which its surface knows better).
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	}
	return Unknown
}

// contextError is the *Error for a context's ending, with the context
// package's own message, as gRPC's status.FromContextError words it.
func contextError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: DeadlineExceeded, Message: err.Error()}
	}
	return &Error{Code: Canceled, Message: err.Error()}
}
