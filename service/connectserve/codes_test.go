package connectserve

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/engine"
)

// TestConnectCodes: each engine code maps to the Connect code of its name,
// and an unknown one to Unknown.
func TestConnectCodes(t *testing.T) {
	for c, want := range map[engine.Code]connect.Code{
		engine.Canceled: connect.CodeCanceled, engine.InvalidArgument: connect.CodeInvalidArgument, engine.DeadlineExceeded: connect.CodeDeadlineExceeded,
		engine.ResourceExhausted: connect.CodeResourceExhausted, engine.Unavailable: connect.CodeUnavailable, engine.Internal: connect.CodeInternal,
		engine.NotFound: connect.CodeNotFound, engine.PermissionDenied: connect.CodePermissionDenied, engine.Aborted: connect.CodeAborted, engine.Code(99): connect.CodeUnknown,
	} {
		if got := connectCode(c); got != want {
			t.Errorf("connectCode(%v) = %v, want %v", c, got, want)
		}
	}
}
