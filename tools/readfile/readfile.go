// Package readfile provides the read_file workspace tool: a text file with
// line numbers for the model, or an image as an image block.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package readfile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// Options bound what one read returns. Zero values mean the defaults.
type Options struct {
	MaxBytes      int   // most bytes of numbered text returned (default 100 KiB)
	MaxLines      int   // most lines returned when the call sets no limit (default 2000)
	MaxLineBytes  int   // longer lines are cut, with a marker (default 2000)
	MaxImageBytes int64 // larger images are refused (default 5 MiB)
}

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 100 << 10
	}
	if o.MaxLines <= 0 {
		o.MaxLines = 2000
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 2000
	}
	if o.MaxImageBytes <= 0 {
		o.MaxImageBytes = 5 << 20
	}
	return o
}

// Args are read_file's arguments; its input schema is inferred from them.
type Args struct {
	Path   string `json:"path" jsonschema:"the file's path, relative to the workspace"`
	Offset int    `json:"offset,omitempty" jsonschema:"the first line to return, counting from 1 (default 1)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"the most lines to return (default 2000)"`
}

// ExtendSchema adds the bounds the struct tags cannot say.
func (Args) ExtendSchema(s *jsonschema.Schema) {
	s.Properties["path"].MinLength = jsonschema.Ptr(1)
	s.Properties["offset"].Minimum = jsonschema.Ptr(1.0)
	s.Properties["limit"].Minimum = jsonschema.Ptr(1.0)
}

// Details is what read_file reports to user interfaces.
type Details struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	FirstLine int    `json:"first_line,omitempty"`
	Lines     int    `json:"lines"`
	Truncated bool   `json:"truncated"`
	MIMEType  string `json:"mime_type,omitempty"` // set for images
}

// images are the image types returned as image blocks, by the MIME type
// http.DetectContentType gives them.
var images = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// New returns the read_file tool over the workspace r gives each call.
func New(r workspace.Resolver, opts Options) tools.Tool {
	opts = opts.withDefaults()
	t := tools.MustTyped("read_file",
		"Reads a text file in the workspace and returns its lines, each prefixed with its line number and a tab "+
			"(the numbers are not part of the file). Reads up to "+strconv.Itoa(opts.MaxLines)+" lines unless limit says otherwise; "+
			"use offset and limit to page through long files. Images (PNG, JPEG, GIF, WebP) come back as images; other binary files are refused.",
		workspace.Typed(r, func(ctx context.Context, _ *tools.Call, ws *workspace.Workspace, args Args) (*tools.Result, error) {
			return read(ctx, ws, opts, args)
		}))
	t.Title = "Read file"
	t.Annotations = tools.Annotations{ReadOnly: true, Idempotent: true}
	return t
}

func read(ctx context.Context, ws *workspace.Workspace, opts Options, args Args) (*tools.Result, error) {
	rel, err := ws.Rel(args.Path)
	if err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	// Stat before opening: opening a named pipe would block until a writer
	// came; O_NONBLOCK covers one swapped in meanwhile.
	info, err := ws.Root().Stat(rel)
	switch {
	case err != nil:
		return workspace.Problem(args.Path, err), nil
	case info.IsDir():
		return tools.Errorf("%s is a folder; use list_files to see what it holds", args.Path), nil
	case !info.Mode().IsRegular():
		return tools.Errorf("%s is not a regular file (%s)", args.Path, info.Mode()), nil
	}
	f, err := ws.Root().OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return workspace.Problem(args.Path, err), nil
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil || !info.Mode().IsRegular() {
		return tools.Errorf("%s is not a regular file", args.Path), nil
	}
	d := Details{Path: rel, Size: info.Size()}

	// Reads fail once ctx ends, so neither a far offset nor one huge line
	// keeps the call reading after it was cancelled.
	br := bufio.NewReaderSize(ctxReader{ctx, f}, 64<<10)
	head, err := br.Peek(8000)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return workspace.Problem(args.Path, err), nil
	}
	if mime := http.DetectContentType(head); images[mime] {
		res := image(br, opts, d, mime)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return res, nil
	}
	if workspace.IsBinary(head) {
		return tools.Errorf("%s is a binary file (%d bytes); read_file returns text and images (PNG, JPEG, GIF, WebP) only", args.Path, info.Size()), nil
	}

	first := max(args.Offset, 1)
	limit := args.Limit
	if limit <= 0 {
		limit = opts.MaxLines
	}
	var out strings.Builder
	// Line numbers add 7 bytes a line: a quarter more fits lines of 28 bytes
	// or longer in one allocation.
	out.Grow(int(min(info.Size()+info.Size()/4+64, int64(opts.MaxBytes)+64)))
	lr := lineReader{r: br}
	var num [24]byte
	n := 0 // lines read so far
	for {
		l, err := lr.next(opts.MaxLineBytes)
		if err == io.EOF {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err != nil {
			return workspace.Problem(args.Path, err), nil
		}
		n++
		if n < first {
			continue
		}
		if d.Lines == limit || out.Len()+len(l.text)+32 > opts.MaxBytes {
			d.Truncated = true
			break
		}
		out.Write(lineNumber(num[:0], n))
		out.Write(l.text)
		if l.cut > 0 {
			fmt.Fprintf(&out, " [line cut: %d more bytes]", l.cut)
		}
		out.WriteByte('\n')
		d.Lines++
	}
	switch {
	case n == 0:
		return result(d, "(empty file)"), nil
	case d.Lines == 0 && !d.Truncated:
		return tools.Errorf("offset %d is past the end of %s, which has %d lines", first, args.Path, n), nil
	case d.Lines == 0:
		return tools.Errorf("line %d of %s is too long to return", first, args.Path), nil
	}
	d.FirstLine = first
	if d.Truncated {
		last := first + d.Lines - 1
		fmt.Fprintf(&out, "[truncated: showed lines %d-%d; the file goes on; read on with offset=%d]\n", first, last, last+1)
	}
	return result(d, out.String()), nil
}

func image(r io.Reader, opts Options, d Details, mime string) *tools.Result {
	if d.Size > opts.MaxImageBytes {
		return tools.Errorf("%s is an image of %d bytes, over the %d-byte limit", d.Path, d.Size, opts.MaxImageBytes)
	}
	data, err := io.ReadAll(io.LimitReader(r, opts.MaxImageBytes+1))
	if err != nil {
		return workspace.Problem(d.Path, err)
	}
	if int64(len(data)) > opts.MaxImageBytes {
		return tools.Errorf("%s grew past the %d-byte image limit while being read", d.Path, opts.MaxImageBytes)
	}
	d.MIMEType = mime
	res := &tools.Result{Content: []tools.Content{{Data: data, MIMEType: mime}}}
	res.Details, _ = json.Marshal(d)
	return res
}

func result(d Details, text string) *tools.Result {
	// Results travel as protobuf strings, which must be UTF-8; a file in
	// another encoding shows its odd bytes as U+FFFD.
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	res := tools.Text(text)
	res.Details, _ = json.Marshal(d)
	return res
}

// ctxReader is a reader that fails with ctx's error once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// lineReader reads lines of any length, keeping at most a given number of
// bytes of each.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
}

type line struct {
	text []byte // without the newline; valid until the next call
	cut  int    // bytes left out
}

func (lr *lineReader) next(keep int) (line, error) {
	lr.buf = lr.buf[:0]
	total := 0
	var err error
	for {
		var chunk []byte
		chunk, err = lr.r.ReadSlice('\n')
		total += len(chunk)
		// Keep one byte past keep, to find a rune boundary when cutting.
		if room := keep + 1 - len(lr.buf); room > 0 {
			lr.buf = append(lr.buf, chunk[:min(room, len(chunk))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return line{}, err
	case total == 0:
		return line{}, io.EOF
	}
	length := total
	if err == nil { // the line ends in a newline
		length--
	}
	text := lr.buf[:min(len(lr.buf), length, keep)]
	cut := length - len(text)
	if cut > 0 {
		// Cut at a rune boundary so the text stays valid UTF-8.
		for len(text) > 0 && !utf8.RuneStart(lr.buf[len(text)]) {
			text = text[:len(text)-1]
			cut++
		}
	} else if n := len(text); n > 0 && text[n-1] == '\r' {
		text = text[:n-1]
	}
	return line{text: text, cut: cut}, nil
}

// lineNumber appends n right-aligned in six columns and a tab, as cat -n
// does.
func lineNumber(b []byte, n int) []byte {
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], int64(n), 10)
	for i := len(d); i < 6; i++ {
		b = append(b, ' ')
	}
	b = append(b, d...)
	return append(b, '\t')
}
