package client

import (
	"encoding/json"
	"fmt"
	"strings"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// OpenAITool is a tool declaration in the shape of the OpenAI Chat
// Completions API's "tools" array.
type OpenAITool struct {
	Type     string         `json:"type"` // always "function"
	Function OpenAIFunction `json:"function"`
}

// OpenAIFunction is the function of an OpenAITool. Strict is left unset on
// purpose: OpenAI's strict mode accepts only schemas whose properties are all
// required and that forbid additional properties, which tool schemas in
// general do not satisfy. Set it on the result for tools whose schemas do.
type OpenAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict,omitempty"`
}

// OpenAITools converts declarations from ListTools into OpenAI's format; the
// input schema becomes the function's parameters.
func OpenAITools(tools []*toolwirev1.Tool) []OpenAITool {
	out := make([]OpenAITool, len(tools))
	for i, t := range tools {
		out[i] = OpenAITool{Type: "function", Function: OpenAIFunction{
			Name:        t.GetName(),
			Description: t.GetDescription(),
			Parameters:  inputSchema(t),
		}}
	}
	return out
}

// inputSchema returns t's input schema; an empty one means any object.
func inputSchema(t *toolwirev1.Tool) json.RawMessage {
	if strings.TrimSpace(t.GetInputSchema()) == "" {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return json.RawMessage(t.GetInputSchema())
}

// OpenAIMessage is a chat message of the OpenAI Chat Completions API with
// the fields a tool message uses: the answer to one tool call.
type OpenAIMessage struct {
	Role       string `json:"role"` // always "tool"
	ToolCallID string `json:"tool_call_id"`
	Content    string `json:"content"`
}

// OpenAIToolMessage converts a result into the tool message the model reads
// next. Tool messages carry text only, so each image is replaced by a
// line saying it was left out. Errors need no flag: the text says what went
// wrong.
func OpenAIToolMessage(r *toolwirev1.CallResult) OpenAIMessage {
	var parts []string
	for _, c := range r.GetContent() {
		switch b := c.GetBlock().(type) {
		case *toolwirev1.Content_Text:
			parts = append(parts, b.Text.GetText())
		case *toolwirev1.Content_Image:
			parts = append(parts, fmt.Sprintf("[image (%s, %d bytes) left out: tool messages carry text only]",
				b.Image.GetMimeType(), len(b.Image.GetData())))
		}
	}
	return OpenAIMessage{Role: "tool", ToolCallID: r.GetCallId(), Content: strings.Join(parts, "\n")}
}

// FromOpenAIToolCalls converts the "tool_calls" array of an assistant
// message from the OpenAI Chat Completions API,
//
//	[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hi\"}"}}]
//
// into toolwire calls, keeping the model's arguments text as it is, but for
// bytes that are not UTF-8, which become U+FFFD (a proto string must be
// UTF-8: one such call failed the whole batch at its marshal). Calls of a
// type other than "function" are an error rather than skipped, because
// every tool call in the conversation needs an answer; so is a call without
// an ID, because its answer names it (tool_call_id), and toolwire refuses
// a batch with a call without one.
func FromOpenAIToolCalls(data []byte) ([]*toolwirev1.ToolCall, error) {
	var calls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(data, &calls); err != nil {
		return nil, fmt.Errorf("openai tool calls: %w", err)
	}
	out := make([]*toolwirev1.ToolCall, 0, len(calls))
	for i, c := range calls {
		if c.Type != "" && c.Type != "function" || c.Function == nil {
			return nil, fmt.Errorf("openai tool call %d (%q): type %q is not supported; want function", i, c.ID, c.Type)
		}
		if c.ID == "" {
			return nil, fmt.Errorf("openai tool call %d: no id", i)
		}
		args, err := argumentsText(c.Function.Arguments)
		if err != nil {
			return nil, fmt.Errorf("openai tool call %d (%q): arguments: %w", i, c.ID, err)
		}
		out = append(out, &toolwirev1.ToolCall{CallId: c.ID, Name: c.Function.Name, Arguments: args})
	}
	return out, nil
}

// argumentsText returns the arguments as JSON text. OpenAI sends them as a
// JSON string holding the text (which encoding/json mends to UTF-8); some
// compatible servers send the object itself, which is taken as it is, with
// what is not UTF-8 mended.
func argumentsText(raw json.RawMessage) (string, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '"' {
		return validUTF8(raw), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// validUTF8 returns raw JSON as text with each run of bytes that are not
// UTF-8 replaced by U+FFFD, as encoding/json reads them in a string and the
// server mends what a tool returns.
func validUTF8(raw json.RawMessage) string {
	return strings.ToValidUTF8(string(raw), "\uFFFD")
}
