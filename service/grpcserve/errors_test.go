package grpcserve

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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
	// Details go with the status, as google.rpc.Status details.
	refused := engine.NewError(engine.ResourceExhausted, errors.New("over the rate")).RetryAfter(2 * time.Second)
	st := status.Convert(grpcError(refused))
	if ds := st.Details(); st.Code() != codes.ResourceExhausted || len(ds) != 1 {
		t.Errorf("an error with RetryInfo became %v %v; want RESOURCE_EXHAUSTED with one detail", st.Code(), ds)
	} else if ri, ok := ds[0].(*errdetails.RetryInfo); !ok || ri.GetRetryDelay().AsDuration() != 2*time.Second {
		t.Errorf("detail %v; want RetryInfo of 2s", ds[0])
	}
	other := errors.New("the stream's own")
	if grpcError(other) != other || grpcError(nil) != nil {
		t.Error("an error that is not the engine's was changed")
	}
}
