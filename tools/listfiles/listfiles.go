// Package listfiles provides the list_files workspace tool: the entries of a
// folder, optionally recursive, with their type and size.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package listfiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// Options bound one listing. Zero values mean the defaults.
type Options struct {
	MaxEntries int // most entries listed (default 1000)
	MaxDepth   int // deepest recursion a call may ask for (default 10)
}

func (o Options) withDefaults() Options {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1000
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 10
	}
	return o
}

// Args are list_files's arguments.
type Args struct {
	Path  string `json:"path,omitempty"`
	Depth int    `json:"depth,omitempty"`
}

// Entry is one listed file or folder.
type Entry struct {
	Path   string `json:"path"` // relative to the workspace, with forward slashes
	Type   string `json:"type"` // file, dir, symlink or other
	Size   int64  `json:"size"`
	Target string `json:"target,omitempty"` // a symlink's target
}

// Details is what list_files reports to user interfaces.
type Details struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated"`
}

// schema is written out rather than inferred (tools.Typed): its maximum
// depth comes from Options, which an argument type's ExtendSchema cannot see.
func schema(maxDepth int) string {
	return `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "the folder to list, relative to the workspace (default: the workspace itself)"},
    "depth": {"type": "integer", "minimum": 1, "maximum": ` + strconv.Itoa(maxDepth) + `, "description": "how many levels to list: 1 lists the folder's own entries (default 1)"}
  },
  "additionalProperties": false
}`
}

// New returns the list_files tool over the workspace r gives each call.
func New(r workspace.Resolver, opts Options) tools.Tool {
	opts = opts.withDefaults()
	return tools.Tool{
		Name:  "list_files",
		Title: "List files",
		Description: "Lists a folder in the workspace: one entry per line, folders ending in /, files with their size in bytes, symlinks with their target. " +
			"Paths are relative to the workspace. Set depth to list subfolders too (symlinked folders are not entered); at most " +
			strconv.Itoa(opts.MaxEntries) + " entries are listed.",
		InputSchema: json.RawMessage(schema(opts.MaxDepth)),
		Annotations: tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler: workspace.Handler(r, func(ctx context.Context, call *tools.Call, ws *workspace.Workspace) (*tools.Result, error) {
			var args Args
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, fmt.Errorf("decoding arguments: %w", err)
			}
			return list(ctx, ws, opts, args)
		}),
	}
}

func list(ctx context.Context, ws *workspace.Workspace, opts Options, args Args) (*tools.Result, error) {
	rel, err := ws.Rel(args.Path)
	if err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	info, err := ws.Root().Stat(rel)
	switch {
	case err != nil:
		return workspace.Problem(displayPath(args.Path), err), nil
	case !info.IsDir():
		return tools.Errorf("%s is a file, not a folder; use read_file to read it", args.Path), nil
	}
	l := lister{ws: ws, max: opts.MaxEntries, d: Details{Path: filepath.ToSlash(rel), Entries: []Entry{}}}
	if err := l.walk(ctx, filepath.ToSlash(rel), min(max(args.Depth, 1), opts.MaxDepth)); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return workspace.Problem(displayPath(args.Path), err), nil
	}

	var b strings.Builder
	for _, e := range l.d.Entries {
		switch e.Type {
		case "dir":
			b.WriteString(e.Path + "/\n")
		case "file":
			fmt.Fprintf(&b, "%s  %d\n", e.Path, e.Size)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", e.Path, e.Target)
		default:
			fmt.Fprintf(&b, "%s  (%s)\n", e.Path, e.Type)
		}
	}
	if len(l.d.Entries) == 0 {
		b.WriteString("(empty folder)\n")
	}
	if l.d.Truncated {
		fmt.Fprintf(&b, "[truncated: listed the first %d entries; list a subfolder or lower depth to see the rest]\n", len(l.d.Entries))
	}
	// File names need not be UTF-8; protobuf strings must be.
	res := tools.Text(strings.ToValidUTF8(b.String(), "\uFFFD"))
	res.Details, err = json.Marshal(l.d)
	return res, err
}

func displayPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

type lister struct {
	ws  *workspace.Workspace
	max int
	d   Details
}

// walk lists dir's entries and, depth permitting, those of its folders,
// depth first in name order. It stops at the entry cap.
func (l *lister) walk(ctx context.Context, dir string, depth int) error {
	entries, err := l.readDir(ctx, dir)
	if err != nil {
		return err
	}
	for _, de := range entries {
		if len(l.d.Entries) == l.max {
			l.d.Truncated = true
			return nil
		}
		p := de.Name()
		if dir != "." {
			p = path.Join(dir, de.Name())
		}
		e := Entry{Path: p, Type: kind(de.Type())}
		switch e.Type {
		case "file":
			if info, err := de.Info(); err == nil {
				e.Size = info.Size()
			}
		case "symlink":
			e.Target, _ = l.ws.Root().Readlink(p)
		}
		l.d.Entries = append(l.d.Entries, e)
		if e.Type == "dir" && depth > 1 {
			if err := l.walk(ctx, p, depth-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// readDir returns dir's entries in name order. It reads them in batches,
// checking ctx between them, so a folder of millions of entries does not
// keep a cancelled call reading; O_DIRECTORY makes a named pipe swapped in
// for the folder fail at once instead of waiting for a writer.
func (l *lister) readDir(ctx context.Context, dir string) ([]fs.DirEntry, error) {
	f, err := l.ws.Root().OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []fs.DirEntry
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.ReadDir(1024)
		all = append(all, batch...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return all, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return "other"
	}
}
