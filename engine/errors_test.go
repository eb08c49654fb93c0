package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
)

// TestErrorCarriesDetailsAndCause: an *Error made with NewError keeps the
// error underneath for errors.Is and errors.As (never in its message beyond
// the text), its details in the order added, and RetryDelay finds the
// RetryInfo through wrapping.
func TestErrorCarriesDetailsAndCause(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("store: %w", context.DeadlineExceeded)
	info := &errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: "toolwire.dev"}
	e := NewError(ResourceExhausted, cause).AddDetail(info).RetryAfter(1500 * time.Millisecond)
	if e.Message != cause.Error() || !errors.Is(e, context.DeadlineExceeded) || CodeOf(e) != ResourceExhausted {
		t.Errorf("NewError = %v (message %q); want the cause's text, unwrapping to it, code ResourceExhausted", e, e.Message)
	}
	if ds := e.Details(); len(ds) != 2 || !proto.Equal(ds[0], info) {
		t.Errorf("details = %v; want the ErrorInfo, then the RetryInfo", ds)
	}
	if d, ok := RetryDelay(fmt.Errorf("refused: %w", e)); !ok || d != 1500*time.Millisecond {
		t.Errorf("RetryDelay = %v, %v; want 1.5s", d, ok)
	}
	if _, ok := RetryDelay(errorf(ResourceExhausted, "busy")); ok {
		t.Error("RetryDelay found a delay in an error without RetryInfo")
	}
	if (&Error{Code: Internal, Message: "x"}).Unwrap() != nil {
		t.Error("an error without a cause unwraps to something")
	}
}

// TestCodeNames: every code has its gRPC name, and one past the last has
// none (the surfaces' mapping tests walk the codes up to it).
func TestCodeNames(t *testing.T) {
	t.Parallel()
	for c, want := range map[Code]string{NotFound: "NotFound", PermissionDenied: "PermissionDenied", Unauthenticated: "Unauthenticated", Internal: "Internal", Aborted: "Aborted"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), want)
		}
	}
	if s := (Aborted + 1).String(); !strings.HasPrefix(s, "Code(") {
		t.Errorf("the code after the last is named %q", s)
	}
}
