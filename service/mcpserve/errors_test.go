package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolwire/toolwire/engine"
)

// TestRPCError: each engine code has its JSON-RPC code, its name in data,
// and the engine's message as it is; what the engine does not know is
// internal, never success.
func TestRPCError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		code int64
		name string
		msg  string
	}{
		{&engine.Error{Code: engine.InvalidArgument, Message: "bad"}, jsonrpc.CodeInvalidParams, "invalid_argument", "bad"},
		{&engine.Error{Code: engine.ResourceExhausted, Message: "busy"}, CodeResourceExhausted, "resource_exhausted", "busy"},
		{&engine.Error{Code: engine.Unavailable, Message: "bye"}, CodeUnavailable, "unavailable", "bye"},
		{&engine.Error{Code: engine.DeadlineExceeded, Message: "late"}, CodeDeadlineExceeded, "deadline_exceeded", "late"},
		{&engine.Error{Code: engine.Canceled, Message: "gone"}, CodeCancelled, "canceled", "gone"},
		{&engine.Error{Code: engine.Internal, Message: "oops"}, jsonrpc.CodeInternalError, "internal", "oops"},
		{&engine.Error{Code: engine.NotFound, Message: "no such batch"}, CodeNotFound, "not_found", "no such batch"},
		{&engine.Error{Code: engine.PermissionDenied, Message: "may not"}, CodePermissionDenied, "permission_denied", "may not"},
		{&engine.Error{Code: engine.Unauthenticated, Message: "who?"}, CodeUnauthenticated, "unauthenticated", "who?"},
		{fmt.Errorf("wrapped: %w", context.Canceled), CodeCancelled, "canceled", "wrapped: context canceled"},
		{errors.New("a sink's own"), jsonrpc.CodeInternalError, "unknown", "a sink's own"},
		{&engine.Error{Code: engine.Code(99), Message: "new"}, jsonrpc.CodeInternalError, "unknown", "new"},
	} {
		var we *jsonrpc.Error
		if !errors.As(rpcError(c.err), &we) || we.Code != c.code || string(we.Data) != `{"code":"`+c.name+`"}` || we.Message != c.msg {
			t.Errorf("rpcError(%v) = %+v; want code %d, data %s, message %q", c.err, we, c.code, c.name, c.msg)
		}
	}
	// Details go in data, each as a google.rpc.Status detail in JSON.
	refused := engine.NewError(engine.ResourceExhausted, errors.New("over the rate")).RetryAfter(1500 * time.Millisecond)
	var we *jsonrpc.Error
	want := `{"code":"resource_exhausted","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.500s"}]}`
	if !errors.As(rpcError(refused), &we) || we.Code != CodeResourceExhausted || compactJSON(t, we.Data) != want {
		t.Errorf("rpcError with RetryInfo = %+v (data %s); want data %s", we, we.Data, want)
	}
}

// compactJSON is b without insignificant spaces (protojson varies them).
func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return buf.String()
}
