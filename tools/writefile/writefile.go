// Package writefile provides the write_file workspace tool: it creates or
// replaces a file atomically, creating missing folders.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package writefile

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// MaxDepth is the most levels a path written may have (a/b/c has three).
// Creating folders cannot be cancelled midway, and a path of 20,000 levels
// takes seconds of it; find_files searches the same depth by default.
const MaxDepth = 64

// Args are write_file's arguments; its input schema is inferred from them.
type Args struct {
	Path    string `json:"path" jsonschema:"the file's path, relative to the workspace; missing folders are created"`
	Content string `json:"content" jsonschema:"the file's whole new content"`
}

// ExtendSchema adds the bound the struct tags cannot say.
func (Args) ExtendSchema(s *jsonschema.Schema) {
	s.Properties["path"].MinLength = jsonschema.Ptr(1)
}

// Details is what write_file reports to user interfaces.
type Details struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytes_written"`
	Action       string `json:"action"` // "created" or "replaced"
}

// New returns the write_file tool over the workspace r gives each call.
func New(r workspace.Resolver) tools.Tool {
	t := tools.MustTyped("write_file",
		"Writes content to a file in the workspace, replacing the file if it exists and creating it and its folders if not. "+
			"The write is atomic: readers see the old content or the new. To change part of a file, prefer edit_file.",
		workspace.Typed(r, write))
	t.Title = "Write file"
	t.Annotations = tools.Annotations{Destructive: true, Idempotent: true}
	return t
}

func write(ctx context.Context, _ *tools.Call, ws *workspace.Workspace, args Args) (*tools.Result, error) {
	rel, err := ws.Rel(args.Path)
	if err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	if rel == "." {
		return tools.Errorf("%s is the workspace folder, not a file", args.Path), nil
	}
	if n := strings.Count(filepath.ToSlash(rel), "/") + 1; n > MaxDepth {
		return tools.Errorf("%s… is %d levels deep, more than write_file's limit of %d", rel[:min(len(rel), 80)], n, MaxDepth), nil
	}
	// A call cancelled by now writes nothing.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	created, err := ws.WriteFile(rel, []byte(args.Content))
	if err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	d := Details{Path: rel, BytesWritten: len(args.Content), Action: "replaced"}
	text := fmt.Sprintf("Replaced %s (%d bytes).", rel, d.BytesWritten)
	if created {
		d.Action = "created"
		text = fmt.Sprintf("Created %s (%d bytes).", rel, d.BytesWritten)
	}
	res := tools.Text(text)
	res.Details, _ = json.Marshal(d)
	return res, nil
}
