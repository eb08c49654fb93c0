package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

// jsonDiff compares want, JSON text, with got marshalled to JSON, both
// decoded so that formatting does not matter.
func jsonDiff(t *testing.T, want string, got any) string {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return cmp.Diff(w, g)
}

var (
	echoTool = &toolwirev1.Tool{
		Name:        "echo",
		Title:       "Echo",
		Description: "Returns the given text unchanged.",
		InputSchema: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		Annotations: &toolwirev1.ToolAnnotations{ReadOnly: true},
	}
	bareTool = &toolwirev1.Tool{Name: "now"}
)

func textBlock(s string) *toolwirev1.Content {
	return &toolwirev1.Content{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: s}}}
}

func imageBlock(data []byte, mime string) *toolwirev1.Content {
	return &toolwirev1.Content{Block: &toolwirev1.Content_Image{Image: &toolwirev1.ImageContent{Data: data, MimeType: mime}}}
}

func TestOpenAITools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tools []*toolwirev1.Tool
		want  string
	}{
		{"none", nil, `[]`},
		{"with schema", []*toolwirev1.Tool{echoTool}, `[{"type":"function","function":{"name":"echo","description":"Returns the given text unchanged.",
			"parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}}]`},
		{"without schema or description", []*toolwirev1.Tool{bareTool}, `[{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := jsonDiff(t, tt.want, client.OpenAITools(tt.tools)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnthropicTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tools []*toolwirev1.Tool
		want  string
	}{
		{"none", nil, `[]`},
		{"with schema", []*toolwirev1.Tool{echoTool}, `[{"name":"echo","description":"Returns the given text unchanged.",
			"input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}]`},
		{"without schema or description", []*toolwirev1.Tool{bareTool}, `[{"name":"now","input_schema":{"type":"object","properties":{}}}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := jsonDiff(t, tt.want, client.AnthropicTools(tt.tools)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

var png = []byte{0x89, 'P', 'N', 'G'}

func TestOpenAIToolMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		result *toolwirev1.CallResult
		want   string
	}{
		{"text", &toolwirev1.CallResult{CallId: "call_1", Content: []*toolwirev1.Content{textBlock("hello")}},
			`{"role":"tool","tool_call_id":"call_1","content":"hello"}`},
		{"blocks joined", &toolwirev1.CallResult{CallId: "call_2", Content: []*toolwirev1.Content{textBlock("a"), textBlock("b")}},
			`{"role":"tool","tool_call_id":"call_2","content":"a\nb"}`},
		{"image left out visibly", &toolwirev1.CallResult{CallId: "call_3", Content: []*toolwirev1.Content{textBlock("see"), imageBlock(png, "image/png")}},
			`{"role":"tool","tool_call_id":"call_3","content":"see\n[image (image/png, 4 bytes) left out: tool messages carry text only]"}`},
		{"error", &toolwirev1.CallResult{CallId: "call_4", IsError: true, Content: []*toolwirev1.Content{textBlock("boom")}},
			`{"role":"tool","tool_call_id":"call_4","content":"boom"}`},
		{"empty", &toolwirev1.CallResult{CallId: "call_5"}, `{"role":"tool","tool_call_id":"call_5","content":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := jsonDiff(t, tt.want, client.OpenAIToolMessage(tt.result)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnthropicToolResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		result *toolwirev1.CallResult
		want   string
	}{
		{"text", &toolwirev1.CallResult{CallId: "toolu_1", Content: []*toolwirev1.Content{textBlock("hello")}},
			`{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"hello"}],"is_error":false}`},
		{"image", &toolwirev1.CallResult{CallId: "toolu_2", Content: []*toolwirev1.Content{textBlock("see"), imageBlock(png, "image/png")}},
			`{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"see"},
			  {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw=="}}],"is_error":false}`},
		{"error", &toolwirev1.CallResult{CallId: "toolu_3", IsError: true, Content: []*toolwirev1.Content{textBlock("boom")}},
			`{"type":"tool_result","tool_use_id":"toolu_3","content":[{"type":"text","text":"boom"}],"is_error":true}`},
		{"empty text dropped", &toolwirev1.CallResult{CallId: "toolu_4", Content: []*toolwirev1.Content{textBlock("")}},
			`{"type":"tool_result","tool_use_id":"toolu_4","is_error":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := jsonDiff(t, tt.want, client.AnthropicToolResult(tt.result)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromOpenAIToolCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []*toolwirev1.ToolCall
		wantErr string
	}{
		{"arguments string kept verbatim",
			`[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\": \"hi\"}"}},
			  {"id":"call_2","type":"function","function":{"name":"sleep","arguments":"{\"ms\":5}"}}]`,
			[]*toolwirev1.ToolCall{
				{CallId: "call_1", Name: "echo", Arguments: `{"text": "hi"}`},
				{CallId: "call_2", Name: "sleep", Arguments: `{"ms":5}`},
			}, ""},
		{"invalid arguments text passed on for the server to report",
			`[{"id":"c","type":"function","function":{"name":"echo","arguments":"{\"text\":"}}]`,
			[]*toolwirev1.ToolCall{{CallId: "c", Name: "echo", Arguments: `{"text":`}}, ""},
		{"arguments object", `[{"id":"c","function":{"name":"echo","arguments":{"text":"hi"}}}]`,
			[]*toolwirev1.ToolCall{{CallId: "c", Name: "echo", Arguments: `{"text":"hi"}`}}, ""},
		{"no arguments", `[{"id":"c","type":"function","function":{"name":"now"}}]`,
			[]*toolwirev1.ToolCall{{CallId: "c", Name: "now"}}, ""},
		{"empty", `[]`, []*toolwirev1.ToolCall{}, ""},
		{"arguments object not UTF-8 mended", "[{\"id\":\"c\",\"function\":{\"name\":\"echo\",\"arguments\":{\"text\":\"a\xff\xfeb\"}}}]",
			[]*toolwirev1.ToolCall{{CallId: "c", Name: "echo", Arguments: "{\"text\":\"a\uFFFDb\"}"}}, ""},
		{"no id", `[{"id":"c1","type":"function","function":{"name":"echo","arguments":"{}"}},{"type":"function","function":{"name":"echo","arguments":"{}"}}]`, nil, "openai tool call 1: no id"},
		{"other type", `[{"id":"c","type":"custom","custom":{"name":"x","input":"y"}}]`, nil, `type "custom" is not supported`},
		{"not an array", `{"id":"c"}`, nil, "openai tool calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := client.FromOpenAIToolCalls([]byte(tt.in))
			checkErr(t, err, tt.wantErr)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromAnthropicToolUses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []*toolwirev1.ToolCall
		wantErr string
	}{
		{"tool_use blocks among others",
			`[{"type":"thinking","thinking":"hmm","signature":"x"},
			  {"type":"text","text":"Let me check."},
			  {"type":"tool_use","id":"toolu_1","name":"echo","input":{"text":"hi"}},
			  {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},
			  {"type":"tool_use","id":"toolu_2","name":"now","input":{}}]`,
			[]*toolwirev1.ToolCall{
				{CallId: "toolu_1", Name: "echo", Arguments: `{"text":"hi"}`},
				{CallId: "toolu_2", Name: "now", Arguments: `{}`},
			}, ""},
		{"no tool use", `[{"type":"text","text":"Done."}]`, nil, ""},
		{"null input", `[{"type":"tool_use","id":"t","name":"now","input":null}]`,
			[]*toolwirev1.ToolCall{{CallId: "t", Name: "now"}}, ""},
		{"input not UTF-8 mended", "[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"echo\",\"input\":{\"text\":\"a\xff\xfeb\"}}]",
			[]*toolwirev1.ToolCall{{CallId: "t", Name: "echo", Arguments: "{\"text\":\"a\uFFFDb\"}"}}, ""},
		{"no id", `[{"type":"tool_use","id":"t","name":"now","input":{}},{"type":"tool_use","name":"echo","input":{}}]`, nil, `anthropic content block 1 (tool_use "echo"): no id`},
		{"not an array", `"text"`, nil, "anthropic content blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := client.FromAnthropicToolUses([]byte(tt.in))
			checkErr(t, err, tt.wantErr)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// checkErr fails t unless err contains want, or is nil when want is empty.
// TestAdaptedCallsNotUTF8Run: calls converted from a model's message whose
// arguments hold bytes that are not UTF-8 reach the server, mended, where
// one such call failed the whole batch at the client's marshal.
func TestAdaptedCallsNotUTF8Run(t *testing.T) {
	t.Parallel()
	c := newTestServer(t, "bufconn", nil)
	anthropic, err := client.FromAnthropicToolUses([]byte("[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"echo\",\"input\":{\"text\":\"a\xffb\"}}]"))
	if err != nil {
		t.Fatal(err)
	}
	openai, err := client.FromOpenAIToolCalls([]byte("[{\"id\":\"o\",\"function\":{\"name\":\"echo\",\"arguments\":{\"text\":\"c\xfed\"}}}]"))
	if err != nil {
		t.Fatal(err)
	}
	req := &toolwirev1.ExecuteBatchRequest{Calls: append(anthropic, openai...)}
	b, err := client.CollectFor(req, c.ExecuteBatch(testContext(t), req))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range b.Results {
		got = append(got, client.Text(r))
	}
	if diff := cmp.Diff([]string{"a\uFFFDb", "c\uFFFDd"}, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("error %v; want one containing %q", err, want)
	}
}
