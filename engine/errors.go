package engine

import (
	"context"
	"errors"
	"fmt"
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
// and is sent as it is.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Message }

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
