// Package writefile provides the write_file workspace tool: it creates or
// replaces a file atomically, creating missing folders.
package writefile

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// Args are write_file's arguments.
type Args struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Details is what write_file reports to user interfaces.
type Details struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytes_written"`
	Action       string `json:"action"` // "created" or "replaced"
}

const schema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "the file's path, relative to the workspace; missing folders are created"},
    "content": {"type": "string", "description": "the file's whole new content"}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`

// New returns the write_file tool over the workspace r gives each call.
func New(r workspace.Resolver) tools.Tool {
	return tools.Tool{
		Name:  "write_file",
		Title: "Write file",
		Description: "Writes content to a file in the workspace, replacing the file if it exists and creating it and its folders if not. " +
			"The write is atomic: readers see the old content or the new. To change part of a file, prefer edit_file.",
		InputSchema: json.RawMessage(schema),
		Annotations: tools.Annotations{Destructive: true, Idempotent: true},
		Handler: workspace.Handler(r, func(ctx context.Context, call *tools.Call, ws *workspace.Workspace) (*tools.Result, error) {
			var args Args
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, fmt.Errorf("decoding arguments: %w", err)
			}
			return write(ws, args), nil
		}),
	}
}

func write(ws *workspace.Workspace, args Args) *tools.Result {
	rel, err := ws.Rel(args.Path)
	if err != nil {
		return workspace.Problem(args.Path, err)
	}
	if rel == "." {
		return tools.Errorf("%s is the workspace folder, not a file", args.Path)
	}
	created, err := ws.WriteFile(rel, []byte(args.Content))
	if err != nil {
		return workspace.Problem(args.Path, err)
	}
	d := Details{Path: rel, BytesWritten: len(args.Content), Action: "replaced"}
	text := fmt.Sprintf("Replaced %s (%d bytes).", rel, d.BytesWritten)
	if created {
		d.Action = "created"
		text = fmt.Sprintf("Created %s (%d bytes).", rel, d.BytesWritten)
	}
	res := tools.Text(text)
	res.Details, _ = json.Marshal(d)
	return res
}
