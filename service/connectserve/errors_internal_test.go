package connectserve

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/engine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// TestConnectErrorMapsEveryEngineCode checks the one mapping of the
// engine's errors to Connect's: every engine code but OK becomes the
// Connect code of the same meaning with the message as it is, an unknown
// code becomes Unknown (never success), and details go with the error.
func TestConnectErrorMapsEveryEngineCode(t *testing.T) {
	t.Parallel()
	names := map[engine.Code]connect.Code{
		engine.Canceled: connect.CodeCanceled, engine.Unknown: connect.CodeUnknown, engine.InvalidArgument: connect.CodeInvalidArgument,
		engine.DeadlineExceeded: connect.CodeDeadlineExceeded, engine.ResourceExhausted: connect.CodeResourceExhausted,
		engine.Unavailable: connect.CodeUnavailable, engine.Internal: connect.CodeInternal, engine.NotFound: connect.CodeNotFound,
		engine.PermissionDenied: connect.CodePermissionDenied, engine.Unauthenticated: connect.CodeUnauthenticated,
		engine.Aborted: connect.CodeAborted,
	}
	for c := engine.Code(1); !strings.HasPrefix(c.String(), "Code("); c++ {
		want, ok := names[c]
		if !ok {
			t.Errorf("engine code %v: this test does not know it; add it", c)
			continue
		}
		var ce *connect.Error
		if !errors.As(connectError(&engine.Error{Code: c, Message: "why"}), &ce) || ce.Code() != want || ce.Message() != "why" {
			t.Errorf("engine code %v became %v; want %v \"why\"", c, ce, want)
		}
	}
	if got := connect.CodeOf(connectError(&engine.Error{Code: engine.Code(99), Message: "new"})); got != connect.CodeUnknown {
		t.Errorf("an unknown engine code became %v; want unknown", got)
	}
	var ce *connect.Error
	refused := engine.NewError(engine.ResourceExhausted, errors.New("over the rate")).RetryAfter(2 * time.Second)
	if !errors.As(connectError(refused), &ce) || len(ce.Details()) != 1 {
		t.Fatalf("an error with RetryInfo became %v; want one detail", ce)
	}
	v, err := ce.Details()[0].Value()
	if ri, ok := v.(*errdetails.RetryInfo); err != nil || !ok || ri.GetRetryDelay().AsDuration() != 2*time.Second {
		t.Errorf("detail %v, %v; want RetryInfo of 2s", v, err)
	}
}
