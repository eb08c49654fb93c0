package readfile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/tools/readfile"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

func lines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{
		"a.txt":      "alpha\nbeta\ngamma",
		"crlf.txt":   "one\r\ntwo\r\n",
		"empty.txt":  "",
		"ten.txt":    lines(10),
		"long.txt":   "short\n" + strings.Repeat("é", 50) + "\n",
		"binary.bin": "ELF\x00\x01\x02",
		"latin1.txt": "caf\xe9\n",
		"dir/x.txt":  "x",
	})
	tool := readfile.New(e.WS, readfile.Options{MaxLines: 4, MaxLineBytes: 21})
	tests := []struct {
		name, args string
		isErr      bool
		text       string
		details    readfile.Details
	}{
		{"whole file, no final newline", `{"path":"a.txt"}`, false,
			"     1\talpha\n     2\tbeta\n     3\tgamma\n",
			readfile.Details{Path: "a.txt", Size: 16, FirstLine: 1, Lines: 3}},
		{"CRLF line ends", `{"path":"crlf.txt"}`, false,
			"     1\tone\n     2\ttwo\n",
			readfile.Details{Path: "crlf.txt", Size: 10, FirstLine: 1, Lines: 2}},
		{"empty file", `{"path":"empty.txt"}`, false, "(empty file)", readfile.Details{Path: "empty.txt"}},
		{"default limit truncates", `{"path":"ten.txt"}`, false,
			"     1\tline 1\n     2\tline 2\n     3\tline 3\n     4\tline 4\n[truncated: showed lines 1-4; the file goes on; read on with offset=5]\n",
			readfile.Details{Path: "ten.txt", Size: 71, FirstLine: 1, Lines: 4, Truncated: true}},
		{"offset and limit", `{"path":"ten.txt","offset":9,"limit":1}`, false,
			"     9\tline 9\n[truncated: showed lines 9-9; the file goes on; read on with offset=10]\n",
			readfile.Details{Path: "ten.txt", Size: 71, FirstLine: 9, Lines: 1, Truncated: true}},
		{"limit reaching the end is not truncated", `{"path":"ten.txt","offset":9,"limit":2}`, false,
			"     9\tline 9\n    10\tline 10\n",
			readfile.Details{Path: "ten.txt", Size: 71, FirstLine: 9, Lines: 2}},
		{"long line cut at a rune boundary", `{"path":"long.txt"}`, false,
			"     1\tshort\n     2\t" + strings.Repeat("é", 10) + " [line cut: 80 more bytes]\n",
			readfile.Details{Path: "long.txt", Size: 107, FirstLine: 1, Lines: 2}},
		{"not UTF-8", `{"path":"latin1.txt"}`, false, "     1\tcaf\uFFFD\n",
			readfile.Details{Path: "latin1.txt", Size: 5, FirstLine: 1, Lines: 1}},
		{"offset past the end", `{"path":"a.txt","offset":4}`, true, "offset 4 is past the end of a.txt, which has 3 lines", readfile.Details{}},
		{"binary", `{"path":"binary.bin"}`, true, "binary.bin is a binary file (6 bytes); read_file returns text and images (PNG, JPEG, GIF, WebP) only", readfile.Details{}},
		{"folder", `{"path":"dir"}`, true, "dir is a folder; use list_files to see what it holds", readfile.Details{}},
		{"missing", `{"path":"nope.txt"}`, true, "no such file or folder: nope.txt", readfile.Details{}},
		{"below a file", `{"path":"a.txt/b"}`, true, "not a folder: a parent of a.txt/b is a file", readfile.Details{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wt.Expect(t, tool, tt.args, tt.isErr, tt.text, tt.details)
		})
	}
}

// TestReadFileByteCap reads a file larger than the byte cap.
func TestReadFileByteCap(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"big.txt": lines(5000)})
	res := wt.Call(t, readfile.New(e.WS, readfile.Options{MaxBytes: 1000, MaxLines: 100000}), `{"path":"big.txt"}`)
	var d readfile.Details
	wt.Details(t, res, &d)
	text := wt.Text(res)
	if res.IsError || !d.Truncated || len(text) > 1100 || d.Lines < 40 ||
		!strings.HasSuffix(text, fmt.Sprintf("read on with offset=%d]\n", d.Lines+1)) {
		t.Errorf("details %+v, %d bytes of text ending %q", d, len(text), text[max(0, len(text)-80):])
	}
}

func TestReadImages(t *testing.T) {
	t.Parallel()
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	encode := func(f func(*bytes.Buffer) error) string {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	files := map[string]string{
		"a.png":  encode(func(b *bytes.Buffer) error { return png.Encode(b, img) }),
		"a.jpg":  encode(func(b *bytes.Buffer) error { return jpeg.Encode(b, img, nil) }),
		"a.gif":  encode(func(b *bytes.Buffer) error { return gif.Encode(b, img, nil) }),
		"a.webp": "RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00",
	}
	e := wt.New(t, files)
	tool := readfile.New(e.WS, readfile.Options{})
	for name, mime := range map[string]string{"a.png": "image/png", "a.jpg": "image/jpeg", "a.gif": "image/gif", "a.webp": "image/webp"} {
		res := wt.Call(t, tool, `{"path":"`+name+`"}`)
		if res.IsError || len(res.Content) != 1 || res.Content[0].MIMEType != mime || string(res.Content[0].Data) != files[name] {
			t.Errorf("%s: error %v, %d blocks, first %q; want one %s block with the file's bytes", name, res.IsError, len(res.Content), res.Content[0].MIMEType, mime)
		}
		var d readfile.Details
		wt.Details(t, res, &d)
		if d.MIMEType != mime || d.Size != int64(len(files[name])) {
			t.Errorf("%s: details %+v", name, d)
		}
	}
	small := readfile.New(e.WS, readfile.Options{MaxImageBytes: 10})
	if res := wt.Call(t, small, `{"path":"a.png"}`); !res.IsError || !strings.Contains(wt.Text(res), "over the 10-byte limit") {
		t.Errorf("oversized image: %q", wt.Text(res))
	}
}

func TestReadFileEscapes(t *testing.T) {
	t.Parallel()
	for _, c := range wt.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			tool := readfile.New(c.WS, readfile.Options{})
			for name, p := range c.Refused {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`}`)
				if text := wt.Text(res); !res.IsError || !strings.Contains(text, "path escapes the workspace") || strings.Contains(text, wt.Secret) {
					t.Errorf("%s (%q): error %v, %q; want an error result saying the path escapes", name, p, res.IsError, text)
				}
			}
			for name, p := range c.Accepted {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`}`)
				if text := wt.Text(res); res.IsError || text != "     1\t"+wt.Inside {
					t.Errorf("%s (%q): error %v, %q; want the file inside", name, p, res.IsError, text)
				}
			}
		})
	}
}

// TestReadFileNotRegular refuses a named pipe rather than blocking on it,
// and a socket, naming each one's type and permissions.
func TestReadFileNotRegular(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	if err := mkfifo(filepath.Join(e.Dir, "fifo")); err != nil {
		t.Skip("mkfifo:", err)
	}
	if err := os.Chmod(filepath.Join(e.Dir, "fifo"), 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	res := wt.Call(t, readfile.New(e.WS, readfile.Options{}), `{"path":"fifo"}`)
	if !res.IsError || !strings.Contains(wt.Text(res), "not a regular file (prw-r-----)") {
		t.Errorf("fifo: %q; want its type and permissions, prw-r-----", wt.Text(res))
	}
	// A Unix socket, when the folder's path fits one.
	l, err := net.Listen("unix", filepath.Join(e.Dir, "s.sock"))
	if err != nil {
		t.Logf("no socket: %v", err)
		return
	}
	defer l.Close()
	if err := os.Chmod(filepath.Join(e.Dir, "s.sock"), 0o755); err != nil {
		t.Fatal(err)
	}
	res = wt.Call(t, readfile.New(e.WS, readfile.Options{}), `{"path":"s.sock"}`)
	if !res.IsError || !strings.Contains(wt.Text(res), "not a regular file (Srwxr-xr-x)") {
		t.Errorf("socket: %q; want its type and permissions, Srwxr-xr-x", wt.Text(res))
	}
}

// TestReadFileCancelled reads far into a long file with a context already
// done: the read stops and returns the context's error.
func TestReadFileCancelled(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"long.txt": lines(10000)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := wt.CallContext(ctx, t, readfile.New(e.WS, readfile.Options{}), `{"path":"long.txt","offset":9999}`, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("result %v, error %v; want context.Canceled", res, err)
	}
}

// TestReadFileCancelledInALongLine reads past one line of 4 MiB with a
// context already done: the read stops inside the line, which holds no
// line break for a per-line check to catch.
func TestReadFileCancelledInALongLine(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"one-line.txt": strings.Repeat("a", 4<<20)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := wt.CallContext(ctx, t, readfile.New(e.WS, readfile.Options{}), `{"path":"one-line.txt","offset":2}`, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("result %v, error %v; want context.Canceled", res, err)
	}
}
