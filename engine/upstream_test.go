package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// TestOutputMismatchBySource: structured content that breaks the output
// schema is an error for a built-in tool (toolwire's own bug) and, for a
// tool whose answers come from another system (HTTP, OpenAPI, MCP, gRPC,
// a remote toolwire), the answer delivered with the mismatch in details,
// whose own members are kept.
func TestOutputMismatchBySource(t *testing.T) {
	t.Parallel()
	e := New(Config{}, Deps{Logger: slog.New(slog.DiscardHandler)})
	defer e.Close()
	for _, tc := range []struct {
		src      tools.Source
		delivers bool
	}{
		{0, false}, {tools.SourceBuiltin, false},
		{tools.SourceHTTP, true}, {tools.SourceMCP, true}, {tools.SourceRemote, true},
	} {
		reg, err := tools.NewRegistry(tools.Tool{Name: "t", Source: tc.src,
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
				return &tools.Result{Content: []tools.Content{{Text: "n is two"}}, StructuredContent: json.RawMessage(`{"n":"two"}`),
					Details: json.RawMessage(`{"status":201}`)}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Call(t.Context(), reg.Snapshot(), &toolwirev1.ToolCall{CallId: "c", Name: "t"}, "")
		if err != nil {
			t.Fatal(err)
		}
		delivered := !res.GetIsError() && res.GetStructuredContent() == `{"n":"two"}` && res.GetContent()[0].GetText().GetText() == "n is two" &&
			strings.Contains(res.GetDetails(), `"status":201`) && strings.Contains(res.GetDetails(), `"output_schema_mismatch":["/n: `)
		failed := res.GetIsError() && res.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR &&
			strings.Contains(res.GetContent()[0].GetText().GetText(), "does not match its declared output schema")
		if (tc.delivers && !delivered) || (!tc.delivers && !failed) {
			t.Errorf("source %v: %v", tc.src.Name(), res)
		}
	}
}

// TestOutputOverTheLimitIsNotChecked: structured content larger than
// MaxResultBytes, which shape leaves out, is not checked against the
// output schema: the result is truncated, not a schema error.
func TestOutputOverTheLimitIsNotChecked(t *testing.T) {
	t.Parallel()
	e := New(Config{MaxResultBytes: 1000}, Deps{Logger: slog.New(slog.DiscardHandler)})
	defer e.Close()
	reg, err := tools.NewRegistry(tools.Tool{Name: "t", Source: tools.SourceBuiltin,
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return &tools.Result{Content: []tools.Content{{Text: "many"}},
				StructuredContent: json.RawMessage(`{"n":"two","pad":"` + strings.Repeat("x", 2000) + `"}`)}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Call(t.Context(), reg.Snapshot(), &toolwirev1.ToolCall{CallId: "c", Name: "t"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetIsError() || !res.GetTruncated() || res.GetStructuredContent() != "" || !strings.Contains(text(res), "structured content of") {
		t.Errorf("got %v; want a truncated result without its structured content, not a schema error", res)
	}
}
