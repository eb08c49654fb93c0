// Package findfiles provides the find_files workspace tool: files whose path
// matches a glob pattern (** included), optionally only those holding lines
// that match a regular expression, with those lines.
//
// A search is bounded whatever its pattern and whatever the workspace
// holds: {a,b} groups multiply the walks a pattern makes, so patterns with
// too many alternatives are refused; the walk stops at a number of entries
// visited and a folder depth, and the content search at a number of files
// and bytes read, each with a result that says where and why it stopped.
// Every step checks the call's context, so a cancelled search returns at
// once.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package findfiles

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/google/jsonschema-go/jsonschema"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// Options bound one search. Zero values mean the defaults.
type Options struct {
	MaxFiles     int   // most paths returned (default 1000)
	MaxMatches   int   // most matching lines returned (default 500)
	MaxFileBytes int64 // larger files are not searched for content (default 4 MiB)
	MaxLineBytes int   // matching lines are cut to this length (default 300)

	// MaxAlternatives bounds the patterns a pattern's {a,b} groups expand
	// to; each is walked on its own, so n groups of two cost 2^n walks. A
	// pattern over it is refused as invalid arguments (default 1024).
	MaxAlternatives int
	// MaxEntries bounds the folder entries read and paths looked up in one
	// search; the search stops there (default 100,000).
	MaxEntries int
	// MaxDepth is the most levels a path searched may have (a/b/c has
	// three); deeper ones are passed over (default 64). Each look-up
	// resolves every folder of its path, so a walk's cost grows with the
	// square of its depth.
	MaxDepth int
	// MaxScanFiles bounds the files whose content one search reads
	// (default 20,000).
	MaxScanFiles int
	// MaxScanBytes bounds the bytes of content one search reads
	// (default 256 MiB).
	MaxScanBytes int64
	// MaxContentInsts bounds the instructions content compiles to. Matching
	// costs up to one step per instruction per byte and cannot be
	// interrupted, so a larger expression is refused as invalid arguments,
	// and each line is matched in its first 256 KiB / instructions bytes at
	// most (64 KiB for small expressions, 512 bytes at the limit), keeping
	// one match to a few milliseconds (default 500).
	MaxContentInsts int
}

// matchWork bounds the instruction-bytes of one match, which cannot be
// interrupted: about 6 ms at the worst step cost measured (25 ns), 90 ms
// under the race detector.
const matchWork = 256 << 10

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
	if o.MaxAlternatives <= 0 {
		o.MaxAlternatives = 1024
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 64
	}
	if o.MaxScanFiles <= 0 {
		o.MaxScanFiles = 20_000
	}
	if o.MaxScanBytes <= 0 {
		o.MaxScanBytes = 256 << 20
	}
	if o.MaxContentInsts <= 0 {
		o.MaxContentInsts = 500
	}
	return o
}

// Args are find_files's arguments; its input schema is inferred from them.
type Args struct {
	Pattern string `json:"pattern" jsonschema:"glob pattern of paths relative to the workspace: * and ? within a name, ** across folders, {a,b} alternatives, [a-z] classes; for example **/*.go"`
	Content string `json:"content,omitempty" jsonschema:"optional regular expression (Go RE2 syntax); only files with a matching line are returned, with those lines"`
}

// ExtendSchema adds the bound the struct tags cannot say.
func (Args) ExtendSchema(s *jsonschema.Schema) {
	s.Properties["pattern"].MinLength = jsonschema.Ptr(1)
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
	// Stopped names the limits that cut the search short, in the order
	// they were met: "depth limit", "entry limit", "content file limit",
	// "content byte limit". The files and lines found up to then are
	// listed.
	Stopped []string `json:"stopped,omitempty"`
	// SkippedLarge and SkippedBinary count the files matching the pattern
	// whose content was not searched: larger than MaxFileBytes, or binary.
	SkippedLarge  int `json:"skipped_large,omitempty"`
	SkippedBinary int `json:"skipped_binary,omitempty"`
}

// New returns the find_files tool over the workspace r gives each call.
func New(r workspace.Resolver, opts Options) tools.Tool {
	opts = opts.withDefaults()
	t := tools.MustTyped("find_files",
		"Finds files in the workspace whose path matches a glob pattern (** matches any number of folders), one path per line. "+
			"With content, a regular expression, returns only the lines that match, as path:line: text. At most "+
			strconv.Itoa(opts.MaxFiles)+" files and "+strconv.Itoa(opts.MaxMatches)+" lines are returned.",
		workspace.Typed(r, func(ctx context.Context, _ *tools.Call, ws *workspace.Workspace, args Args) (*tools.Result, error) {
			return find(ctx, ws, opts, args)
		}))
	t.Title = "Find files"
	t.Annotations = tools.Annotations{ReadOnly: true, Idempotent: true}
	return t
}

// errFull stops the walk once the caps on what is returned are reached;
// errStopped once a limit on the work done is.
var (
	errFull    = errors.New("caps reached")
	errStopped = errors.New("search limit reached")
)

// Limits a search can stop at, as Details.Stopped names them.
const (
	depthLimit       = "depth limit"
	entryLimit       = "entry limit"
	contentFileLimit = "content file limit"
	contentByteLimit = "content byte limit"
)

func find(ctx context.Context, ws *workspace.Workspace, opts Options, args Args) (*tools.Result, error) {
	pattern := strings.TrimPrefix(args.Pattern, "./")
	if !doublestar.ValidatePattern(pattern) {
		return tools.Errorf("pattern %q is not a valid glob pattern", args.Pattern), nil
	}
	if n := alternatives(pattern, opts.MaxAlternatives); n > opts.MaxAlternatives {
		res := tools.Errorf("pattern %q has more than %d alternatives (its {a,b} groups multiply: each group multiplies the count by its number of choices), over find_files's limit of %d; use fewer groups or a wildcard such as * instead",
			args.Pattern, opts.MaxAlternatives, opts.MaxAlternatives)
		res.ErrorKind = int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS)
		return res, nil
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
		if insts := program(args.Content); insts > opts.MaxContentInsts {
			res := tools.Errorf("content %q is too complex: it compiles to %d instructions, over find_files's limit of %d; use fewer or smaller repetitions ({n,m}) and alternatives",
				args.Content, insts, opts.MaxContentInsts)
			res.ErrorKind = int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS)
			return res, nil
		}
	}

	f := &finder{ctx: ctx, root: ws.Root(), opts: opts, re: re, d: Details{Pattern: args.Pattern, Content: args.Content, Files: []string{}}}
	if re != nil {
		f.insts = program(args.Content)
		f.window = min(max(matchWork/f.insts, 512), 64<<10)
	}
	// WithFailOnIOErrors lets the walk end on ctx and the limits; walkFS
	// turns every other error into "not there", so an unreadable folder or
	// a symlink that leads out is passed over as before.
	err := doublestar.GlobWalk((*walkFS)(f), pattern, func(p string, _ fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return f.visit(p)
	}, doublestar.WithFilesOnly(), doublestar.WithNoFollow(), doublestar.WithFailOnIOErrors())
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case workspace.Exhausted(err):
		// Files the search could not open are not files that do not
		// match: no answer rather than a wrong one.
		at := "."
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			at = pe.Path
		}
		return tools.Errorf("searching %s stopped, so which files match is not known: %s", args.Pattern, workspace.Describe(at, err)), nil
	case err != nil && !errors.Is(err, errFull) && !errors.Is(err, errStopped):
		return tools.Errorf("searching %s: %v", args.Pattern, err), nil
	}

	var b strings.Builder
	switch {
	case re != nil:
		for _, m := range f.d.Matches {
			fmt.Fprintf(&b, "%s:%d: %s\n", workspace.Display(m.Path), m.Line, m.Text)
		}
	default:
		for _, p := range f.d.Files {
			b.WriteString(workspace.Display(p))
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
	if skipped := f.skipped(); skipped != "" {
		fmt.Fprintf(&b, "[not searched: %s]\n", skipped)
	}
	for _, reason := range f.d.Stopped {
		fmt.Fprintf(&b, "[stopped early: %s: %s; narrow the pattern to search the rest]\n", reason, f.explain(reason))
	}
	// File names and lines need not be UTF-8; protobuf strings must be.
	res := tools.Text(strings.ToValidUTF8(b.String(), "\uFFFD"))
	res.Details, err = json.Marshal(f.d)
	return res, err
}

// program returns how many instructions the valid regular expression expr
// compiles to, the factor matching's cost grows by.
func program(expr string) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 1
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 1
	}
	return max(len(prog.Inst), 1)
}

// alternatives returns how many patterns pattern's {a,b} groups expand to,
// or limit+1 if more. Groups in sequence multiply; the choices of a group,
// each a sequence itself, add. It lexes as doublestar does (\ escapes, [...]
// classes) and relies on ValidatePattern for balanced braces.
func alternatives(pattern string, limit int) int {
	capped := func(n int) int { return min(n, limit+1) }
	type group struct{ sum, prod int } // choices so far; the current choice
	stack := []group{{0, 1}}
	for i := 0; i < len(pattern); i++ {
		top := &stack[len(stack)-1]
		switch pattern[i] {
		case '\\':
			i++
		case '[':
			for i++; i < len(pattern) && pattern[i] != ']'; i++ {
				if pattern[i] == '\\' {
					i++
				}
			}
		case '{':
			stack = append(stack, group{0, 1})
		case ',':
			if len(stack) > 1 {
				top.sum, top.prod = capped(top.sum+top.prod), 1
			}
		case '}':
			if len(stack) > 1 {
				n := capped(top.sum + top.prod)
				stack = stack[:len(stack)-1]
				outer := &stack[len(stack)-1]
				outer.prod = capped(outer.prod * n)
			}
		}
	}
	return stack[0].prod
}

type finder struct {
	ctx  context.Context
	root *os.Root
	opts Options
	re   *regexp.Regexp
	br   *bufio.Reader
	d    Details

	insts  int // instructions re compiles to
	window int // bytes of a line matched

	entries      int   // folder entries read and paths looked up
	scanFiles    int   // files opened for their content
	scannedBytes int64 // content bytes read
}

// stop records that the search met the limit reason.
func (f *finder) stop(reason string) {
	if !slices.Contains(f.d.Stopped, reason) {
		f.d.Stopped = append(f.d.Stopped, reason)
	}
}

// explain says what the limit reason left out.
func (f *finder) explain(reason string) string {
	switch reason {
	case depthLimit:
		return fmt.Sprintf("paths more than %d levels deep were not searched", f.opts.MaxDepth)
	case entryLimit:
		return fmt.Sprintf("the search looked at %d files and folders, its limit", f.opts.MaxEntries)
	case contentFileLimit:
		return fmt.Sprintf("the contents of %d files were searched, the limit", f.opts.MaxScanFiles)
	default:
		return fmt.Sprintf("%d bytes of content were searched, the limit", f.opts.MaxScanBytes)
	}
}

// skipped says which files' content was not searched and why, or "".
func (f *finder) skipped() string {
	var parts []string
	files := func(n int, kind string) string {
		if n == 1 {
			return "1 " + kind + "file"
		}
		return fmt.Sprintf("%d %sfiles", n, kind)
	}
	if n := f.d.SkippedLarge; n > 0 {
		size := fmt.Sprintf("%d bytes", f.opts.MaxFileBytes)
		if f.opts.MaxFileBytes%(1<<20) == 0 {
			size = fmt.Sprintf("%d MiB", f.opts.MaxFileBytes>>20)
		}
		parts = append(parts, fmt.Sprintf("%s over %s, find_files's limit for a content search", files(n, ""), size))
	}
	if n := f.d.SkippedBinary; n > 0 {
		parts = append(parts, files(n, "binary "))
	}
	return strings.Join(parts, "; ")
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
// of one of them. It returns an error only to end the search: the
// context's, errFull, errStopped, or the server's own shortage
// (workspace.Exhausted), which says nothing about the file.
func (f *finder) grep(p string) (found bool, err error) {
	if f.scanFiles == f.opts.MaxScanFiles {
		f.stop(contentFileLimit)
		return false, errStopped
	}
	// O_NONBLOCK: opening a named pipe must not wait for a writer.
	file, err := f.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, shortage(err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return false, shortage(err)
	}
	if info.Size() > f.opts.MaxFileBytes {
		f.d.SkippedLarge++
		return false, nil
	}
	f.scanFiles++
	r := scanReader{f: f, r: file}
	if f.br == nil {
		f.br = bufio.NewReaderSize(r, 64<<10)
	}
	f.br.Reset(r) // one buffer for the whole search
	if head, _ := f.br.Peek(8000); workspace.IsBinary(head) {
		if err := f.ended(); err != nil {
			return false, err
		}
		f.d.SkippedBinary++
		return false, nil
	}
	for n := 1; ; n++ {
		line, err := f.br.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if err := f.ended(); err != nil {
				return found, err // the line was cut short by the end
			}
		}
		text := bytes.TrimSuffix(line, []byte("\n"))
		text = text[:min(len(text), f.window)]
		if err := f.ctx.Err(); err != nil {
			return found, err // an atomic load: cheap beside a match
		}
		if len(text) > 0 && f.re.Match(text) {
			if len(f.d.Matches) == f.opts.MaxMatches {
				f.d.Truncated = true
				return found, errFull
			}
			found = true
			f.d.Matches = append(f.d.Matches, Match{Path: p, Line: n, Text: cut(bytes.TrimSuffix(line, []byte("\n")), f.opts.MaxLineBytes)})
		}
		// A line longer than the buffer (or the window) is searched in its
		// first 64 KiB (or window) only; the rest is skipped.
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = f.br.ReadSlice('\n')
		}
		if err != nil {
			return found, f.ended()
		}
	}
}

// ended returns the error that ends the search after a read failed, if the
// failure was the context's or a limit's; nil for the file's own errors.
func (f *finder) ended() error {
	if err := f.ctx.Err(); err != nil {
		return err
	}
	if slices.Contains(f.d.Stopped, contentByteLimit) {
		return errStopped
	}
	return nil
}

// scanReader reads a file's content for grep, counting it against the
// search's byte limit and failing once the call's context ends, so even a
// long file is left promptly.
type scanReader struct {
	f *finder
	r io.Reader
}

func (s scanReader) Read(p []byte) (int, error) {
	if err := s.f.ctx.Err(); err != nil {
		return 0, err
	}
	left := s.f.opts.MaxScanBytes - s.f.scannedBytes
	if left <= 0 {
		s.f.stop(contentByteLimit)
		return 0, errStopped
	}
	n, err := s.r.Read(p[:min(int64(len(p)), left)])
	s.f.scannedBytes += int64(n)
	return n, err
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

// shortage returns err if it is the server's own shortage
// (workspace.Exhausted), which must end a search, and nil otherwise.
func shortage(err error) error {
	if workspace.Exhausted(err) {
		return err
	}
	return nil
}

// walkFS is the workspace as the glob walk sees it: every look-up checks
// the call's context and counts against the search's limits, and fails with
// the context's error or errStopped, which end the walk, as does the
// server's own shortage (out of open files: it says nothing about the
// path). Any other failure reads as "not there", which the walk passes
// over.
type walkFS finder

func (w *walkFS) Open(name string) (fs.File, error) {
	if err := w.check(name, 1); err != nil {
		return nil, err
	}
	return w.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func (w *walkFS) Stat(name string) (fs.FileInfo, error) {
	if err := w.check(name, 1); err != nil {
		return nil, err
	}
	info, err := w.root.Stat(name)
	if err != nil {
		if err := shortage(err); err != nil {
			return nil, err
		}
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return info, nil
}

// ReadDir reads a folder in batches, so that neither a huge folder nor a
// cancelled call keeps it reading.
func (w *walkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := w.check(name, 1); err != nil {
		return nil, err
	}
	// O_DIRECTORY: a named pipe where a folder was expected fails at once
	// instead of waiting for a writer.
	dir, err := w.root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		if err := shortage(err); err != nil {
			return nil, err
		}
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	defer dir.Close()
	if depth(name) >= w.opts.MaxDepth {
		// Its entries would be too deep: passed over, and said so if any.
		if some, _ := dir.ReadDir(1); len(some) > 0 {
			(*finder)(w).stop(depthLimit)
		}
		return nil, nil
	}
	var all []fs.DirEntry
	for {
		batch, err := dir.ReadDir(256)
		if stop := w.check(name, len(batch)); errors.Is(stop, errStopped) {
			// The entries within the limit are returned without the error,
			// which would drop them all, so that the files among them are
			// found before the next look-up ends the walk (a folder of
			// 200,000 files was "no files match").
			all = append(all, batch[:len(batch)-(w.entries-w.opts.MaxEntries)]...)
			break
		} else if stop != nil {
			return nil, stop
		}
		all = append(all, batch...)
		if err := shortage(err); err != nil {
			return nil, err
		}
		if err != nil || len(batch) == 0 {
			break // io.EOF, or an unreadable folder: what was read is all there is
		}
	}
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return all, nil
}

// check counts n entries at name against the limits and checks the context.
func (w *walkFS) check(name string, n int) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if depth(name) > w.opts.MaxDepth {
		(*finder)(w).stop(depthLimit)
		return &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	w.entries += n
	if w.entries > w.opts.MaxEntries {
		(*finder)(w).stop(entryLimit)
		return errStopped
	}
	return nil
}

// depth returns how many folders deep name is: 0 for ".", 1 for "a", 2 for
// "a/b".
func depth(name string) int {
	if name == "." || name == "" {
		return 0
	}
	return strings.Count(name, "/") + 1
}
