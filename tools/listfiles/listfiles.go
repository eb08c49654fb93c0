// Package listfiles provides the list_files workspace tool: the entries of a
// folder, optionally recursive, with their type and size.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package listfiles

import (
	"container/heap"
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
	// MaxRead bounds the folder entries one listing reads; it stops
	// reading there, lists what it read and says so (default 100,000, as
	// find_files).
	MaxRead int
}

func (o Options) withDefaults() Options {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1000
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 10
	}
	if o.MaxRead <= 0 {
		o.MaxRead = 100_000
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
	// Stopped is ["entry limit"] when the listing read MaxRead entries
	// before the end of a folder: that folder is listed from the entries
	// read, and no folder after it was entered. find_files's field of the
	// same name says the same.
	Stopped []string `json:"stopped,omitempty"`
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
	depth := min(max(args.Depth, 1), opts.MaxDepth)
	l := lister{ws: ws, max: opts.MaxEntries, maxRead: opts.MaxRead, d: Details{Path: filepath.ToSlash(rel), Entries: []Entry{}}}
	if err := l.walk(ctx, filepath.ToSlash(rel), depth); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return workspace.Problem(displayPath(args.Path), err), nil
	}

	var b strings.Builder
	for _, e := range l.d.Entries {
		path := workspace.Display(e.Path)
		switch e.Type {
		case "dir":
			b.WriteString(path + "/\n")
		case "file":
			fmt.Fprintf(&b, "%s  %d\n", path, e.Size)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", path, workspace.Display(e.Target))
		default:
			fmt.Fprintf(&b, "%s  (%s)\n", path, e.Type)
		}
	}
	if len(l.d.Entries) == 0 {
		b.WriteString("(empty folder)\n")
	}
	if l.d.Truncated {
		fmt.Fprintf(&b, "[truncated: listed the first %d entries; list a subfolder or lower depth to see the rest]\n", len(l.d.Entries))
	}
	if l.cut != "" {
		l.d.Stopped = []string{entryLimit}
		after := ""
		if depth > 1 {
			after = ", and no folder after it was entered"
		}
		fmt.Fprintf(&b, "[stopped early: %s: read %d folder entries, list_files's limit, so %s is listed from the entries read, not all of them%s]\n",
			entryLimit, l.maxRead, displayPath(l.cut), after)
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

// entryLimit is the limit Details.Stopped names.
const entryLimit = "entry limit"

type lister struct {
	ws      *workspace.Workspace
	max     int // Options.MaxEntries
	maxRead int // Options.MaxRead
	d       Details

	read int    // folder entries read
	cut  string // the folder whose reading maxRead cut short, if any
	held int    // most entries one folder's reading kept at once, for the tests
}

// walk lists dir's entries and, depth permitting, those of its folders,
// depth first in name order. It stops at the entry cap, and enters no
// folder once maxRead has cut a reading short.
func (l *lister) walk(ctx context.Context, dir string, depth int) error {
	names, more, err := l.readDir(ctx, dir, l.max-len(l.d.Entries))
	if err != nil {
		return err
	}
	for _, name := range names {
		if len(l.d.Entries) == l.max {
			l.d.Truncated = true
			return nil
		}
		p := name
		if dir != "." {
			p = path.Join(dir, name)
		}
		info, err := l.ws.Root().Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed since it was read, as os.ReadDir passes over
		case err != nil:
			return err
		}
		e := Entry{Path: p, Type: kind(info.Mode())}
		switch e.Type {
		case "file":
			e.Size = info.Size()
		case "symlink":
			e.Target, _ = l.ws.Root().Readlink(p)
		}
		l.d.Entries = append(l.d.Entries, e)
		if e.Type == "dir" && depth > 1 && l.cut == "" {
			if err := l.walk(ctx, p, depth-1); err != nil {
				return err
			}
		}
	}
	// Listing the keep names readDir kept took the listing to its cap.
	if more {
		l.d.Truncated = true
	}
	return nil
}

// readDir returns the first keep of dir's names in name order, and whether
// dir has more. Only those can be listed before the cap, so only those are
// kept, never the whole folder (200,000 long names held 125 MiB a call), and
// only names are read: a folder opened in an os.Root reads each entry as a
// DirEntry with an lstat, so walk looks up only what it lists. It reads in
// batches, checking ctx between them, so a folder of millions of entries
// does not keep a cancelled call reading, and stops at the listing's
// maxRead, setting l.cut; O_DIRECTORY makes a named pipe swapped in for the
// folder fail at once instead of waiting for a writer.
func (l *lister) readDir(ctx context.Context, dir string, keep int) (names []string, more bool, err error) {
	f, err := l.ws.Root().OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	first := firstNames{keep: keep}
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		batch, err := f.Readdirnames(1024)
		if left := l.maxRead - l.read; len(batch) > left {
			batch, l.cut = batch[:left], dir
		}
		l.read += len(batch)
		for _, name := range batch {
			if !first.add(name) {
				more = true
			}
		}
		l.held = max(l.held, first.Len())
		switch {
		case errors.Is(err, io.EOF) || l.cut != "" || (more && keep == 0):
			// With nothing to keep, one name more is all there is to know.
			slices.Sort(first.names)
			return first.names, more, nil
		case err != nil:
			return nil, false, err
		}
	}
}

// firstNames keeps the keep names first in order of those added: a
// max-heap, so the last of them is at the top, replaced by any name before
// it.
type firstNames struct {
	keep  int
	names []string
}

// add adds name, and reports false if that left a name out: name itself,
// or the one it took the place of.
func (h *firstNames) add(name string) bool {
	switch {
	case len(h.names) < h.keep:
		heap.Push(h, name)
		return true
	case h.keep > 0 && name < h.names[0]:
		h.names[0] = name
		heap.Fix(h, 0)
	}
	return false
}

func (h *firstNames) Len() int           { return len(h.names) }
func (h *firstNames) Less(i, j int) bool { return h.names[i] > h.names[j] }
func (h *firstNames) Swap(i, j int)      { h.names[i], h.names[j] = h.names[j], h.names[i] }
func (h *firstNames) Push(x any)         { h.names = append(h.names, x.(string)) }
func (h *firstNames) Pop() any {
	last := h.names[len(h.names)-1]
	h.names = h.names[:len(h.names)-1]
	return last
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
