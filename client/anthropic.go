package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// AnthropicTool is a tool declaration in the shape of the Anthropic Messages
// API's "tools" array.
type AnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// AnthropicTools converts declarations from ListTools into Anthropic's
// format.
func AnthropicTools(tools []*toolwirev1.Tool) []AnthropicTool {
	out := make([]AnthropicTool, len(tools))
	for i, t := range tools {
		out[i] = AnthropicTool{Name: t.GetName(), Description: t.GetDescription(), InputSchema: inputSchema(t)}
	}
	return out
}

// AnthropicToolResultBlock is a "tool_result" content block of the Anthropic
// Messages API, sent in a user message to answer a "tool_use" block.
type AnthropicToolResultBlock struct {
	Type      string             `json:"type"` // always "tool_result"
	ToolUseID string             `json:"tool_use_id"`
	Content   []AnthropicContent `json:"content,omitempty"`
	IsError   bool               `json:"is_error"`
}

// AnthropicContent is a text or image block inside an AnthropicToolResultBlock.
type AnthropicContent struct {
	Type   string                `json:"type"` // "text" or "image"
	Text   string                `json:"text,omitempty"`
	Source *AnthropicImageSource `json:"source,omitempty"`
}

// AnthropicImageSource is the inline data of an image block.
type AnthropicImageSource struct {
	Type      string `json:"type"` // always "base64"
	MediaType string `json:"media_type"`
	Data      string `json:"data"` // base64 (standard encoding)
}

// AnthropicToolResult converts a result into the tool_result block the
// model reads next. Empty text blocks are dropped, because the API rejects
// them.
func AnthropicToolResult(r *toolwirev1.CallResult) AnthropicToolResultBlock {
	out := AnthropicToolResultBlock{Type: "tool_result", ToolUseID: r.GetCallId(), IsError: r.GetIsError()}
	for _, c := range r.GetContent() {
		switch b := c.GetBlock().(type) {
		case *toolwirev1.Content_Text:
			if b.Text.GetText() != "" {
				out.Content = append(out.Content, AnthropicContent{Type: "text", Text: b.Text.GetText()})
			}
		case *toolwirev1.Content_Image:
			out.Content = append(out.Content, AnthropicContent{Type: "image", Source: &AnthropicImageSource{
				Type:      "base64",
				MediaType: b.Image.GetMimeType(),
				Data:      base64.StdEncoding.EncodeToString(b.Image.GetData()),
			}})
		}
	}
	return out
}

// FromAnthropicToolUses converts the content blocks of an assistant message
// from the Anthropic Messages API into toolwire calls. Only "tool_use"
// blocks,
//
//	{"type":"tool_use","id":"toolu_1","name":"echo","input":{"text":"hi"}}
//
// become calls; text, thinking and server-side tool blocks are skipped. The
// input's bytes that are not UTF-8 become U+FFFD (a proto string must be
// UTF-8: one such call failed the whole batch at its marshal), and a
// tool_use without an ID is an error, because its tool_result names it.
func FromAnthropicToolUses(data []byte) ([]*toolwirev1.ToolCall, error) {
	var blocks []struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(data, &blocks); err != nil {
		return nil, fmt.Errorf("anthropic content blocks: %w", err)
	}
	var out []*toolwirev1.ToolCall
	for i, b := range blocks {
		if b.Type != "tool_use" {
			continue
		}
		if b.ID == "" {
			return nil, fmt.Errorf("anthropic content block %d (tool_use %q): no id", i, b.Name)
		}
		args := validUTF8(b.Input)
		if args == "null" {
			args = ""
		}
		out = append(out, &toolwirev1.ToolCall{CallId: b.ID, Name: b.Name, Arguments: args})
	}
	return out, nil
}
