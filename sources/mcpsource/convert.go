package mcpsource

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools"
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// declaration converts an MCP tool into toolwire's tool, calling it through
// h, with its schemas compiled by schemas, or explains why it cannot be
// offered.
func declaration(prefix string, t *mcp.Tool, h tools.Handler, schemas *tools.SchemaCache) (tools.Tool, error) {
	name := prefix + "_" + t.Name
	if !toolName.MatchString(name) {
		return tools.Tool{}, fmt.Errorf("name %q does not match [A-Za-z0-9_.-]{1,128}", name)
	}
	in, err := inputSchema(t.InputSchema)
	if err != nil {
		return tools.Tool{}, err
	}
	var out json.RawMessage
	if t.OutputSchema != nil {
		if out, err = json.Marshal(t.OutputSchema); err != nil {
			return tools.Tool{}, fmt.Errorf("output schema: %w", err)
		}
	}
	d := tools.Tool{
		Name:         name,
		Title:        t.Title,
		Description:  t.Description,
		InputSchema:  in,
		OutputSchema: out,
		Annotations:  annotations(t.Annotations),
		Source:       tools.SourceMCP,
		Handler:      h,
	}
	if d.Title == "" && t.Annotations != nil {
		d.Title = t.Annotations.Title
	}
	// Compile the schemas now, alone, so one bad tool is skipped rather than
	// failing the update of all the server's tools. The registry does not
	// compile a compiled tool again, and a listing's tools share one
	// cache, so each distinct schema text is compiled once: compiled per
	// tool, and again by the registry, 4000 tools declaring one 6.5 KB
	// schema took 22 s of CPU, at every tools/list_changed.
	return schemas.Compile(d)
}

// inputSchema returns the schema as JSON with a root of type object. MCP
// requires one, but servers in the wild omit "type"; it is added then. A
// schema whose root is something else cannot describe named arguments.
func inputSchema(s any) (json.RawMessage, error) {
	if s == nil {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("input schema is not a JSON object")
	}
	switch typ, ok := root["type"]; {
	case !ok:
		root["type"] = "object"
		return json.Marshal(root)
	case typ != "object":
		return nil, fmt.Errorf("input schema has root type %v, not \"object\"", typ)
	}
	return b, nil
}

// annotations applies MCP's defaults: a tool is assumed destructive and
// open-world unless it says otherwise, and a read-only tool destroys nothing.
func annotations(a *mcp.ToolAnnotations) tools.Annotations {
	if a == nil {
		return tools.Annotations{Destructive: true, OpenWorld: true}
	}
	return tools.Annotations{
		ReadOnly:    a.ReadOnlyHint,
		Destructive: !a.ReadOnlyHint && (a.DestructiveHint == nil || *a.DestructiveHint),
		Idempotent:  a.IdempotentHint,
		OpenWorld:   a.OpenWorldHint == nil || *a.OpenWorldHint,
	}
}

// result converts an MCP tool result. Text and images map to content blocks;
// other blocks are rendered as text that names their type, so the model
// still learns of them. At most maxContentBlocks are kept, as
// decodeResult keeps them.
func result(r *mcp.CallToolResult) *tools.Result {
	out := &tools.Result{IsError: r.IsError}
	blocks := r.Content
	if len(blocks) > maxContentBlocks {
		blocks = blocks[:maxContentBlocks-1]
	}
	for _, c := range blocks {
		out.Content = append(out.Content, content(c))
	}
	if left := len(r.Content) - len(blocks); left > 0 {
		out.Content = append(out.Content, leftOut(left))
	}
	if r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			out.StructuredContent = b
		} else {
			out.Content = append(out.Content, tools.Content{Text: "[structured content that is not JSON: " + err.Error() + "]"})
		}
	}
	return out
}

func content(c mcp.Content) tools.Content {
	switch c := c.(type) {
	case *mcp.TextContent:
		return tools.Content{Text: c.Text}
	case *mcp.ImageContent:
		return tools.Content{Data: c.Data, MIMEType: c.MIMEType}
	case *mcp.AudioContent:
		return tools.Content{Text: fmt.Sprintf("[audio content: %s, %d bytes, not shown]", c.MIMEType, len(c.Data))}
	case *mcp.ResourceLink:
		var b strings.Builder
		fmt.Fprintf(&b, "[resource link: %s", c.URI)
		for _, f := range []struct{ k, v string }{{"name", c.Name}, {"title", c.Title}, {"description", c.Description}, {"mime type", c.MIMEType}} {
			if f.v != "" {
				fmt.Fprintf(&b, "; %s: %s", f.k, f.v)
			}
		}
		return tools.Content{Text: b.String() + "]"}
	case *mcp.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return tools.Content{Text: "[embedded resource]"}
		}
		if r.Text != "" {
			return tools.Content{Text: fmt.Sprintf("[embedded resource %s (%s)]\n%s", r.URI, r.MIMEType, r.Text)}
		}
		return tools.Content{Text: fmt.Sprintf("[embedded resource %s: %s, %d bytes, not shown]", r.URI, r.MIMEType, len(r.Blob))}
	default:
		b, _ := c.MarshalJSON()
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &head)
		return tools.Content{Text: fmt.Sprintf("[%s content: %s]", head.Type, b)}
	}
}
