// Package editfile provides the edit_file workspace tool: an exact find and
// replace in one file, reported as a unified diff.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package editfile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/pmezard/go-difflib/difflib"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// MaxFileBytes is the largest file edit_file changes; an edit reads and
// rewrites the whole file.
const MaxFileBytes = 10 << 20

// MaxDiffLines bounds the changed lines whose diff Details carries: matching
// lines is quadratic in them at worst, and the diff serves user interfaces
// only. A larger change is reported without its diff.
const MaxDiffLines = 2000

// Args are edit_file's arguments.
type Args struct {
	Path       string `json:"path" jsonschema:"the file's path, relative to the workspace"`
	OldText    string `json:"old_text" jsonschema:"the exact text to replace, including whitespace and indentation; it must occur exactly once unless replace_all is set"`
	NewText    string `json:"new_text" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence of old_text (default false)"`
}

// ExtendSchema adds the bounds the struct tags cannot say.
func (Args) ExtendSchema(s *jsonschema.Schema) {
	s.Properties["path"].MinLength = jsonschema.Ptr(1)
	s.Properties["old_text"].MinLength = jsonschema.Ptr(1)
}

// Details is what edit_file reports to user interfaces.
type Details struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
	Diff         string `json:"diff"` // unified diff of the change; empty when DiffOmitted
	// DiffOmitted says why Diff is empty: the change spans more than
	// MaxDiffLines lines.
	DiffOmitted string `json:"diff_omitted,omitempty"`
}

// New returns the edit_file tool over the workspace r gives each call.
func New(r workspace.Resolver) tools.Tool {
	t := tools.MustTyped("edit_file",
		"Replaces old_text with new_text in a file in the workspace. old_text must match the file exactly (whitespace included) "+
			"and occur exactly once, unless replace_all is set; add surrounding lines to make it unique. Do not include read_file's line numbers.",
		workspace.Typed(r, func(ctx context.Context, _ *tools.Call, ws *workspace.Workspace, args Args) (*tools.Result, error) {
			return edit(ctx, ws, args)
		}))
	t.Title = "Edit file"
	t.Annotations = tools.Annotations{Destructive: true}
	return t
}

func edit(ctx context.Context, ws *workspace.Workspace, args Args) (*tools.Result, error) {
	rel, err := ws.Rel(args.Path)
	if err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	if args.OldText == args.NewText {
		return tools.Errorf("old_text and new_text are the same; there is nothing to change"), nil
	}
	data, res := read(ws, rel, args.Path)
	if res != nil {
		return res, nil
	}
	old := string(data)
	n, err := count(ctx, old, args.OldText)
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return tools.Errorf("old_text not found in %s; it must match exactly, whitespace and indentation included (read the file again to see its current text)", args.Path), nil
	case n > 1 && !args.ReplaceAll:
		return tools.Errorf("old_text matches %d times in %s; set replace_all or give more context so it matches once", n, args.Path), nil
	}
	replaced, err := replace(ctx, old, args.OldText, args.NewText, n)
	if err != nil {
		return nil, err // a call cancelled by now changes nothing
	}
	if _, err := ws.WriteFile(rel, []byte(replaced)); err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	d := Details{Path: rel, Replacements: n}
	d.Diff, d.DiffOmitted = unifiedDiff(rel, old, replaced)
	times := "1 replacement"
	if n > 1 {
		times = fmt.Sprintf("%d replacements", n)
	}
	res = tools.Text(fmt.Sprintf("Edited %s: %s.", rel, times))
	res.Details, _ = json.Marshal(d)
	return res, nil
}

// read returns the content of the text file at rel (the model's path p), or
// the error result saying why it cannot be edited.
func read(ws *workspace.Workspace, rel, p string) ([]byte, *tools.Result) {
	// O_NONBLOCK: opening a named pipe must not wait for a writer; the
	// descriptor's own Stat then refuses it.
	f, err := ws.Root().OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, workspace.Problem(p, err)
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return nil, workspace.Problem(p, err)
	case info.IsDir():
		return nil, tools.Errorf("%s is a folder, not a file", p)
	case !info.Mode().IsRegular():
		return nil, tools.Errorf("%s is not a regular file", p)
	case info.Size() > MaxFileBytes:
		return nil, tools.Errorf("%s has %d bytes, over edit_file's limit of %d; use write_file or run_command", p, info.Size(), MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	switch {
	case err != nil:
		return nil, workspace.Problem(p, err)
	case len(data) > MaxFileBytes:
		return nil, tools.Errorf("%s grew past edit_file's limit of %d bytes while being read", p, MaxFileBytes)
	case workspace.IsBinary(data):
		return nil, tools.Errorf("%s is a binary file; edit_file changes text only", p)
	}
	return data, nil
}

// checkEvery is how many occurrences count and replace handle between two
// looks at the context: a 10 MiB file can hold millions.
const checkEvery = 1024

// count returns how many times old occurs in s, as strings.Count does,
// failing with ctx's error once ctx ends.
func count(ctx context.Context, s, old string) (int, error) {
	n := 0
	for i := strings.Index(s, old); i >= 0; i = strings.Index(s, old) {
		if n++; n%checkEvery == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		s = s[i+len(old):]
	}
	return n, nil
}

// replace returns s with its n occurrences of old replaced by new, as
// strings.Replace does, failing with ctx's error once ctx ends.
func replace(ctx context.Context, s, old, new string, n int) (string, error) {
	var b strings.Builder
	b.Grow(len(s) + n*(len(new)-len(old)))
	for k := range n {
		if k%checkEvery == 0 && ctx.Err() != nil {
			return "", ctx.Err()
		}
		i := strings.Index(s, old)
		b.WriteString(s[:i])
		b.WriteString(new)
		s = s[i+len(old):]
	}
	b.WriteString(s)
	return b.String(), ctx.Err()
}

// unifiedDiff returns the change from a to b in unified format, with three
// lines of context, as diff -u and git show it; or, for a change of more
// than MaxDiffLines lines, no diff and why.
func unifiedDiff(path, a, b string) (diff, omitted string) {
	if n := changedLines(a, b); n > MaxDiffLines {
		return "", fmt.Sprintf("the change spans %d lines, more than the %d a diff is made for", n, MaxDiffLines)
	}
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        splitLines(a),
		B:        splitLines(b),
		FromFile: "a/" + path,
		ToFile:   "b/" + path,
		Context:  3,
	})
	if err != nil {
		return "", "" // difflib fails only when writing to its buffer fails
	}
	return diff, ""
}

// changedLines returns how many lines the change from a to b spans: the
// lines between the bytes they share at their start and at their end, on
// the side that has more. It compares in blocks and counts with
// strings.Count, so even a 10 MiB file takes well under a millisecond.
func changedLines(a, b string) int {
	const block = 4096
	pre := 0
	for pre+block <= min(len(a), len(b)) && a[pre:pre+block] == b[pre:pre+block] {
		pre += block
	}
	for pre < min(len(a), len(b)) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	room := min(len(a), len(b)) - pre
	for suf+block <= room && a[len(a)-suf-block:len(a)-suf] == b[len(b)-suf-block:len(b)-suf] {
		suf += block
	}
	for suf < room && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	return max(strings.Count(a[pre:len(a)-suf], "\n"), strings.Count(b[pre:len(b)-suf], "\n")) + 1
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
