// Package editfile provides the edit_file workspace tool: an exact find and
// replace in one file, reported as a unified diff.
package editfile

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// MaxFileBytes is the largest file edit_file changes; an edit reads and
// rewrites the whole file.
const MaxFileBytes = 10 << 20

// Args are edit_file's arguments.
type Args struct {
	Path       string `json:"path"`
	OldText    string `json:"old_text"`
	NewText    string `json:"new_text"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// Details is what edit_file reports to user interfaces.
type Details struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
	Diff         string `json:"diff"` // unified diff of the change
}

const schema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "the file's path, relative to the workspace"},
    "old_text": {"type": "string", "minLength": 1, "description": "the exact text to replace, including whitespace and indentation; it must occur exactly once unless replace_all is set"},
    "new_text": {"type": "string", "description": "the text to put in its place"},
    "replace_all": {"type": "boolean", "description": "replace every occurrence of old_text (default false)"}
  },
  "required": ["path", "old_text", "new_text"],
  "additionalProperties": false
}`

// New returns the edit_file tool over the workspace r gives each call.
func New(r workspace.Resolver) tools.Tool {
	return tools.Tool{
		Name:  "edit_file",
		Title: "Edit file",
		Description: "Replaces old_text with new_text in a file in the workspace. old_text must match the file exactly (whitespace included) " +
			"and occur exactly once, unless replace_all is set; add surrounding lines to make it unique. Do not include read_file's line numbers.",
		InputSchema: json.RawMessage(schema),
		Annotations: tools.Annotations{Destructive: true},
		Handler: workspace.Handler(r, func(ctx context.Context, call *tools.Call, ws *workspace.Workspace) (*tools.Result, error) {
			var args Args
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, fmt.Errorf("decoding arguments: %w", err)
			}
			return edit(ws, args), nil
		}),
	}
}

func edit(ws *workspace.Workspace, args Args) *tools.Result {
	rel, err := ws.Rel(args.Path)
	if err != nil {
		return workspace.Problem(args.Path, err)
	}
	if args.OldText == args.NewText {
		return tools.Errorf("old_text and new_text are the same; there is nothing to change")
	}
	info, err := ws.Root().Stat(rel)
	switch {
	case err != nil:
		return workspace.Problem(args.Path, err)
	case info.IsDir():
		return tools.Errorf("%s is a folder, not a file", args.Path)
	case !info.Mode().IsRegular():
		return tools.Errorf("%s is not a regular file", args.Path)
	case info.Size() > MaxFileBytes:
		return tools.Errorf("%s has %d bytes, over edit_file's limit of %d; use write_file or run_command", args.Path, info.Size(), MaxFileBytes)
	}
	data, err := fs.ReadFile(ws.Root().FS(), rel)
	if err != nil {
		return workspace.Problem(args.Path, err)
	}
	if workspace.IsBinary(data) {
		return tools.Errorf("%s is a binary file; edit_file changes text only", args.Path)
	}
	old := string(data)
	n := strings.Count(old, args.OldText)
	switch {
	case n == 0:
		return tools.Errorf("old_text not found in %s; it must match exactly, whitespace and indentation included (read the file again to see its current text)", args.Path)
	case n > 1 && !args.ReplaceAll:
		return tools.Errorf("old_text matches %d times in %s; set replace_all or give more context so it matches once", n, args.Path)
	}
	replaced := strings.Replace(old, args.OldText, args.NewText, n)
	if _, err := ws.WriteFile(rel, []byte(replaced)); err != nil {
		return workspace.Problem(args.Path, err)
	}
	d := Details{Path: rel, Replacements: n, Diff: unifiedDiff(rel, old, replaced)}
	times := "1 replacement"
	if n > 1 {
		times = fmt.Sprintf("%d replacements", n)
	}
	res := tools.Text(fmt.Sprintf("Edited %s: %s.", rel, times))
	res.Details, _ = json.Marshal(d)
	return res
}

// unifiedDiff returns the change from a to b in unified format, with three
// lines of context, as diff -u and git show it.
func unifiedDiff(path, a, b string) string {
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        splitLines(a),
		B:        splitLines(b),
		FromFile: "a/" + path,
		ToFile:   "b/" + path,
		Context:  3,
	})
	if err != nil {
		return "" // difflib fails only when writing to its buffer fails
	}
	return diff
}

// splitLines splits s into lines that each end in a newline. difflib's own
// SplitLines adds an empty line after a final newline, which would show in
// every hunk at the end of a file.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		return lines[:len(lines)-1]
	}
	lines[len(lines)-1] += "\n"
	return lines
}
