package mcpsource

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

// TestUpstreamOutputMismatch: an MCP server's answer that does not match
// the output schema it declared is still its answer. Through the engine,
// as every surface runs calls, the result is delivered (content and
// structured content) with the mismatch in details, not turned into a
// TOOL_ERROR.
func TestUpstreamOutputMismatch(t *testing.T) {
	srv := newHTTPServer(t, testserver.Hooks{})
	g, reg := newGateway(t)
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "up", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the drift tool", sourcetest.Has("up_drift"))
	logs := &logbuf.Buffer{}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	defer eng.Close()
	res, err := eng.Call(t.Context(), snap, &toolwirev1.ToolCall{CallId: "c1", Name: "up_drift"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetIsError() || res.GetStructuredContent() != `{"count":"many"}` || len(res.GetContent()) != 1 || res.GetContent()[0].GetText().GetText() != `{"count":"many"}` {
		t.Errorf("result %v; want the server's answer delivered", res)
	}
	var det struct {
		Mismatch []string `json:"output_schema_mismatch"`
	}
	if err := json.Unmarshal([]byte(res.GetDetails()), &det); err != nil || len(det.Mismatch) != 1 || !strings.HasPrefix(det.Mismatch[0], "/count: ") {
		t.Errorf("details %s (%v); want the mismatch at /count", res.GetDetails(), err)
	}
	if !strings.Contains(logs.String(), `"msg":"upstream result does not match the tool's output schema"`) {
		t.Errorf("no log line says the answer did not match:\n%s", logs)
	}
}
