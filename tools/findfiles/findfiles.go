// Package findfiles provides the find_files workspace tool: files whose path
// matches a glob pattern (** included), optionally only those holding lines
// that match a regular expression, with those lines.
package findfiles

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// Options bound one search. Zero values mean the defaults.
type Options struct {
	MaxFiles     int   // most paths returned (default 1000)
	MaxMatches   int   // most matching lines returned (default 500)
	MaxFileBytes int64 // larger files are not searched for content (default 4 MiB)
	MaxLineBytes int   // matching lines are cut to this length (default 300)
}

func (o Options) withDefaults() Options {
	if o.MaxFiles <= 0 {
		o.MaxFiles = 1000
	}
	if o.MaxMatches <= 0 {
		o.MaxMatches = 500
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 4 << 20
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 300
	}
	return o
}

// Args are find_files's arguments.
type Args struct {
	Pattern string `json:"pattern"`
	Content string `json:"content,omitempty"`
}

// Match is one matching line.
type Match struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// Details is what find_files reports to user interfaces.
type Details struct {
	Pattern   string   `json:"pattern"`
	Content   string   `json:"content,omitempty"`
	Files     []string `json:"files"`
	Matches   []Match  `json:"matches,omitempty"`
	Truncated bool     `json:"truncated"`
}

const schema = `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "description": "glob pattern of paths relative to the workspace: * and ? within a name, ** across folders, {a,b} alternatives, [a-z] classes; for example **/*.go"},
    "content": {"type": "string", "description": "optional regular expression (Go RE2 syntax); only files with a matching line are returned, with those lines"}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`

// New returns the find_files tool over the workspace r gives each call.
func New(r workspace.Resolver, opts Options) tools.Tool {
	opts = opts.withDefaults()
	return tools.Tool{
		Name:  "find_files",
		Title: "Find files",
		Description: "Finds files in the workspace whose path matches a glob pattern (** matches any number of folders), one path per line. " +
			"With content, a regular expression, returns only the lines that match, as path:line: text. At most " +
			strconv.Itoa(opts.MaxFiles) + " files and " + strconv.Itoa(opts.MaxMatches) + " lines are returned.",
		InputSchema: json.RawMessage(schema),
		Annotations: tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler: workspace.Handler(r, func(ctx context.Context, call *tools.Call, ws *workspace.Workspace) (*tools.Result, error) {
			var args Args
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, fmt.Errorf("decoding arguments: %w", err)
			}
			return find(ctx, ws, opts, args)
		}),
	}
}

// errFull stops the walk once the caps are reached.
var errFull = errors.New("caps reached")

func find(ctx context.Context, ws *workspace.Workspace, opts Options, args Args) (*tools.Result, error) {
	pattern := strings.TrimPrefix(args.Pattern, "./")
	if !doublestar.ValidatePattern(pattern) {
		return tools.Errorf("pattern %q is not a valid glob pattern", args.Pattern), nil
	}
	if base, _ := doublestar.SplitPattern(pattern); strings.HasPrefix(pattern, "/") || !fs.ValidPath(base) {
		return tools.Errorf("%v: pattern %q must be relative to the workspace, without ..", workspace.ErrEscapes, args.Pattern), nil
	}
	var re *regexp.Regexp
	if args.Content != "" {
		var err error
		if re, err = regexp.Compile(args.Content); err != nil {
			return tools.Errorf("content is not a valid regular expression: %v", err), nil
		}
	}

	f := finder{fsys: walkFS{ctx, ws.Root().FS()}, opts: opts, re: re, d: Details{Pattern: args.Pattern, Content: args.Content, Files: []string{}}}
	err := doublestar.GlobWalk(f.fsys, pattern, func(p string, _ fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return f.visit(p)
	}, doublestar.WithFilesOnly(), doublestar.WithNoFollow())
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && !errors.Is(err, errFull):
		return tools.Errorf("searching %s: %v", args.Pattern, err), nil
	}

	var b strings.Builder
	switch {
	case re != nil:
		for _, m := range f.d.Matches {
			fmt.Fprintf(&b, "%s:%d: %s\n", m.Path, m.Line, m.Text)
		}
	default:
		for _, p := range f.d.Files {
			b.WriteString(p)
			b.WriteByte('\n')
		}
	}
	switch {
	case len(f.d.Files) == 0 && re != nil:
		fmt.Fprintf(&b, "no line matches %q in files matching %s\n", args.Content, args.Pattern)
	case len(f.d.Files) == 0:
		fmt.Fprintf(&b, "no files match %s\n", args.Pattern)
	}
	if f.d.Truncated {
		fmt.Fprintf(&b, "[truncated: the first %d files and %d lines; narrow the pattern to see the rest]\n", len(f.d.Files), len(f.d.Matches))
	}
	// File names and lines need not be UTF-8; protobuf strings must be.
	res := tools.Text(strings.ToValidUTF8(b.String(), "\uFFFD"))
	res.Details, err = json.Marshal(f.d)
	return res, err
}

type finder struct {
	fsys fs.FS
	opts Options
	re   *regexp.Regexp
	br   *bufio.Reader
	d    Details
}

// visit takes one path that matches the pattern.
func (f *finder) visit(p string) error {
	if f.re == nil {
		if len(f.d.Files) == f.opts.MaxFiles {
			f.d.Truncated = true
			return errFull
		}
		f.d.Files = append(f.d.Files, p)
		return nil
	}
	found, err := f.grep(p)
	if found {
		if len(f.d.Files) == f.opts.MaxFiles {
			f.d.Truncated = true
			return errFull
		}
		f.d.Files = append(f.d.Files, p)
	}
	return err
}

// grep records the lines of the file at p that match. Unreadable, binary
// and oversized files are passed over: a search should not fail because
// of one of them.
func (f *finder) grep(p string) (found bool, err error) {
	file, err := f.fsys.Open(p)
	if err != nil {
		return false, nil
	}
	defer file.Close()
	if info, err := file.Stat(); err != nil || !info.Mode().IsRegular() || info.Size() > f.opts.MaxFileBytes {
		return false, nil
	}
	if f.br == nil {
		f.br = bufio.NewReaderSize(file, 64<<10)
	}
	f.br.Reset(file) // one buffer for the whole search
	if head, _ := f.br.Peek(8000); workspace.IsBinary(head) {
		return false, nil
	}
	for n := 1; ; n++ {
		line, err := f.br.ReadSlice('\n')
		if len(line) > 0 && f.re.Match(bytes.TrimSuffix(line, []byte("\n"))) {
			if len(f.d.Matches) == f.opts.MaxMatches {
				f.d.Truncated = true
				return found, errFull
			}
			found = true
			f.d.Matches = append(f.d.Matches, Match{Path: p, Line: n, Text: cut(bytes.TrimSuffix(line, []byte("\n")), f.opts.MaxLineBytes)})
		}
		// A line longer than the buffer is searched in its first 64 KiB
		// only; the rest is skipped.
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = f.br.ReadSlice('\n')
		}
		if err != nil {
			return found, nil
		}
	}
}

// cut returns line as a string of at most n bytes, cut at a rune boundary.
func cut(line []byte, n int) string {
	if len(line) <= n {
		return strings.TrimSuffix(string(line), "\r")
	}
	for n > 0 && !utf8.RuneStart(line[n]) {
		n--
	}
	return string(line[:n]) + "…"
}

// walkFS is the workspace as the glob walk sees it. Once ctx is done every
// folder fails to read, which the walk passes over, so a search of a large
// tree ends promptly even where nothing matches (the walk calls back only on
// matches).
type walkFS struct {
	ctx  context.Context
	fsys fs.FS
}

func (w walkFS) Open(name string) (fs.File, error)     { return w.fsys.Open(name) }
func (w walkFS) Stat(name string) (fs.FileInfo, error) { return fs.Stat(w.fsys, name) }

func (w walkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, err
	}
	return fs.ReadDir(w.fsys, name)
}
