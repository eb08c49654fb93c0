package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/engine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGRPCErrorMapsEveryEngineCode checks the one mapping of the engine's
// errors to statuses: every engine code but OK becomes the gRPC code of the
// same name with the message as it is, a code this surface does not know
// becomes Unknown (never OK, which would turn an error into success), and
// other errors pass unchanged.
func TestGRPCErrorMapsEveryEngineCode(t *testing.T) {
	t.Parallel()
	n := 0
	for c := engine.Code(1); !strings.HasPrefix(c.String(), "Code("); c++ {
		st := status.Convert(grpcError(&engine.Error{Code: c, Message: "why"}))
		if st.Code().String() != c.String() || st.Message() != "why" {
			t.Errorf("engine code %v became %v %q; want %v \"why\"", c, st.Code(), st.Message(), c)
		}
		n++
	}
	if n < 7 {
		t.Fatalf("checked %d codes; the engine has more", n)
	}
	for _, c := range []engine.Code{engine.OK, engine.Code(99)} {
		if got := status.Code(grpcError(&engine.Error{Code: c, Message: "why"})); got != codes.Unknown {
			t.Errorf("engine code %v became %v; want Unknown", c, got)
		}
	}
	other := errors.New("the stream's own")
	if grpcError(other) != other || grpcError(nil) != nil {
		t.Error("an error that is not the engine's was changed")
	}
}
