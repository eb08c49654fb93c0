package grpcserve

import (
	"testing"

	"github.com/toolwire/toolwire/engine"
	"google.golang.org/grpc/codes"
)

// TestGRPCCodes: each engine code maps to the gRPC code of its name, and an
// unknown one to Unknown, never OK.
func TestGRPCCodes(t *testing.T) {
	for c, want := range map[engine.Code]codes.Code{
		engine.Canceled: codes.Canceled, engine.InvalidArgument: codes.InvalidArgument, engine.DeadlineExceeded: codes.DeadlineExceeded,
		engine.ResourceExhausted: codes.ResourceExhausted, engine.Unavailable: codes.Unavailable, engine.Internal: codes.Internal,
		engine.NotFound: codes.NotFound, engine.PermissionDenied: codes.PermissionDenied, engine.Aborted: codes.Aborted, engine.Code(99): codes.Unknown,
	} {
		if got := grpcCode(c); got != want {
			t.Errorf("grpcCode(%v) = %v, want %v", c, got, want)
		}
	}
}
