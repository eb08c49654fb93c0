package listfiles_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools/listfiles"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

func TestListFiles(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{
		"b.txt":        "12345",
		"a/one.go":     "1",
		"a/deep/x.txt": "xx",
		".hidden":      "",
	})
	if err := os.Symlink("a", filepath.Join(e.Dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(e.Dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	tool := listfiles.New(e.WS, listfiles.Options{MaxEntries: 5, MaxDepth: 3})
	tests := []struct {
		name, args string
		isErr      bool
		text       string
		details    listfiles.Details
	}{
		{"top level", `{}`, false, ".hidden  0\na/\nb.txt  5\nempty/\nlink -> a\n",
			listfiles.Details{Path: ".", Entries: []listfiles.Entry{
				{Path: ".hidden", Type: "file"}, {Path: "a", Type: "dir"}, {Path: "b.txt", Type: "file", Size: 5},
				{Path: "empty", Type: "dir"}, {Path: "link", Type: "symlink", Target: "a"}}}},
		{"subfolder, recursive", `{"path":"a","depth":3}`, false, "a/deep/\na/deep/x.txt  2\na/one.go  1\n",
			listfiles.Details{Path: "a", Entries: []listfiles.Entry{
				{Path: "a/deep", Type: "dir"}, {Path: "a/deep/x.txt", Type: "file", Size: 2}, {Path: "a/one.go", Type: "file", Size: 1}}}},
		{"through a symlink", `{"path":"link/deep"}`, false, "link/deep/x.txt  2\n",
			listfiles.Details{Path: "link/deep", Entries: []listfiles.Entry{{Path: "link/deep/x.txt", Type: "file", Size: 2}}}},
		{"entry cap", `{"depth":2}`, false, ".hidden  0\na/\na/deep/\na/one.go  1\nb.txt  5\n[truncated: listed the first 5 entries; list a subfolder or lower depth to see the rest]\n",
			listfiles.Details{Path: ".", Truncated: true, Entries: []listfiles.Entry{
				{Path: ".hidden", Type: "file"}, {Path: "a", Type: "dir"}, {Path: "a/deep", Type: "dir"},
				{Path: "a/one.go", Type: "file", Size: 1}, {Path: "b.txt", Type: "file", Size: 5}}}},
		{"empty folder", `{"path":"empty"}`, false, "(empty folder)\n", listfiles.Details{Path: "empty", Entries: []listfiles.Entry{}}},
		{"a file", `{"path":"b.txt"}`, true, "b.txt is a file, not a folder; use read_file to read it", listfiles.Details{}},
		{"missing", `{"path":"nope"}`, true, "no such file or folder: nope", listfiles.Details{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wt.Expect(t, tool, tt.args, tt.isErr, tt.text, tt.details)
		})
	}
}

// TestListFilesNamesCannotForgeLines lists names a command can make: a
// newline (which would forge an entry of its own), a terminal escape, a
// byte that is not UTF-8. Each is shown quoted, on its one line; the
// details keep the names as they are.
func TestListFilesNamesCannotForgeLines(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{
		"evil\nsecret.txt  999": "x",
		"esc\x1b[31mred":        "",
		"bad\xff":               "",
		"plain é.txt":           "",
	})
	if err := os.Symlink("esc\x1b[31mred", filepath.Join(e.Dir, "link")); err != nil {
		t.Fatal(err)
	}
	tool := listfiles.New(e.WS, listfiles.Options{})
	wt.Expect(t, tool, `{}`, false,
		`"bad\xff"  0`+"\n"+`"esc\x1b[31mred"  0`+"\n"+`"evil\nsecret.txt  999"  1`+"\n"+`link -> "esc\x1b[31mred"`+"\n"+"plain é.txt  0\n",
		listfiles.Details{Path: ".", Entries: []listfiles.Entry{
			{Path: "bad\uFFFD", Type: "file"}, {Path: "esc\x1b[31mred", Type: "file"}, {Path: "evil\nsecret.txt  999", Type: "file", Size: 1},
			{Path: "link", Type: "symlink", Target: "esc\x1b[31mred"}, {Path: "plain é.txt", Type: "file"}}})
}

// TestListFilesDepthIsBounded asks for more depth than the schema allows.
func TestListFilesDepthIsBounded(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	tool := listfiles.New(e.WS, listfiles.Options{MaxDepth: 3})
	if !strings.Contains(string(tool.InputSchema), `"maximum": 3`) || !tool.Annotations.ReadOnly {
		t.Errorf("schema %s, annotations %+v", tool.InputSchema, tool.Annotations)
	}
}

func TestListFilesEscapes(t *testing.T) {
	t.Parallel()
	for _, c := range wt.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			tool := listfiles.New(c.WS, listfiles.Options{})
			refused := map[string]string{"parent": "..", "absolute parent": c.Parent, "sibling": c.Other, "dir symlink": "dir-out", "NUL": "sub\x00"}
			for name, p := range refused {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`}`)
				if text := wt.Text(res); !res.IsError || !strings.Contains(text, "path escapes the workspace") || strings.Contains(text, "outside.txt") {
					t.Errorf("%s (%q): error %v, %q; want an error result saying the path escapes", name, p, res.IsError, text)
				}
			}
			for _, p := range []string{"sub", "./sub/deep/..", c.Dir + "/sub"} {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`}`)
				if text := wt.Text(res); res.IsError || text != "sub/deep/\n" {
					t.Errorf("%q: error %v, %q; want sub/deep/", p, res.IsError, text)
				}
			}
			// Symlinks are listed, never entered, so a recursive listing stays
			// inside however the links point.
			res := wt.Call(t, tool, `{"depth":10}`)
			if text := wt.Text(res); res.IsError || strings.Contains(text, "dir-out/") || !strings.Contains(text, "dir-out -> ..") {
				t.Errorf("recursive listing:\n%s", text)
			}
		})
	}
}

// TestListFilesReadLimit lists folders holding more than MaxRead entries:
// the listing stops reading there, lists what it read in name order,
// enters no folder after it, and says so in its text and details.
func TestListFilesReadLimit(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a/1": "", "a/2": "", "c/1": ""}
	for i := range 100 {
		files[fmt.Sprintf("b/%03d", i)] = ""
	}
	e := wt.New(t, files)
	tool := listfiles.New(e.WS, listfiles.Options{MaxRead: 35})
	for _, tt := range []struct {
		name, args string
		head       []string // the paths listed before b's entries
		fromB      int      // how many of b's entries are listed
		tail       []string // and after them
		note       string
	}{
		{"depth 2", `{"depth":2}`, []string{"a", "a/1", "a/2", "b"}, 35 - 3 - 2, []string{"c"},
			"[stopped early: entry limit: read 35 folder entries, list_files's limit, so b is listed from the entries read, not all of them, and no folder after it was entered]\n"},
		{"depth 1", `{"path":"b"}`, nil, 35, nil,
			"[stopped early: entry limit: read 35 folder entries, list_files's limit, so b is listed from the entries read, not all of them]\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := wt.Call(t, tool, tt.args)
			var d listfiles.Details
			wt.Details(t, res, &d)
			var paths []string
			for _, e := range d.Entries {
				paths = append(paths, e.Path)
			}
			text := wt.Text(res)
			if res.IsError || len(paths) != len(tt.head)+tt.fromB+len(tt.tail) {
				t.Fatalf("error %v, %d entries:\n%s\nwant %d", res.IsError, len(paths), text, len(tt.head)+tt.fromB+len(tt.tail))
			}
			head, b, tail := paths[:len(tt.head)], paths[len(tt.head):len(tt.head)+tt.fromB], paths[len(tt.head)+tt.fromB:]
			if !slices.Equal(head, tt.head) || !slices.Equal(tail, tt.tail) || !slices.IsSorted(b) ||
				slices.ContainsFunc(b, func(p string) bool { return !strings.HasPrefix(p, "b/") }) {
				t.Errorf("listed %q\nwant %q, %d of b's entries in order, %q", paths, tt.head, tt.fromB, tt.tail)
			}
			if !strings.HasSuffix(text, tt.note) || !slices.Equal(d.Stopped, []string{"entry limit"}) || d.Truncated {
				t.Errorf("stopped %q, truncated %v, text:\n%s\nwant it to end %q", d.Stopped, d.Truncated, text, tt.note)
			}
		})
	}
}

// BenchmarkListFilesWideFolder lists a folder of 200,000 empty files with
// 237-byte names, one call at a time and 8 at once (a read-only lane runs
// 16), reporting the heap's peak above where it started, sampled every
// millisecond, as peak-heap-MiB. What one call keeps is MaxEntries
// entries; what it reads is MaxRead (100,000) of them. Make the folder on
// tmpfs (TMPDIR=/dev/shm): 200,000 files take seconds to make on a disk.
func BenchmarkListFilesWideFolder(b *testing.B) {
	e := wt.New(b, nil)
	wide := filepath.Join(e.Dir, "wide")
	if err := os.Mkdir(wide, 0o755); err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 230)
	for i := range 200_000 {
		f, err := os.Create(filepath.Join(wide, fmt.Sprintf("%s%07d", pad, i)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	run := wt.Runner(b, listfiles.New(e.WS, listfiles.Options{}))
	for _, calls := range []int{1, 8} {
		b.Run(fmt.Sprintf("%d calls", calls), func(b *testing.B) {
			b.ReportAllocs()
			peak := heapPeak(b)
			for b.Loop() {
				var wg sync.WaitGroup
				for range calls {
					wg.Go(func() {
						if res := run(`{"path":"wide"}`); res.IsError {
							b.Error(wt.Text(res))
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(peak())/(1<<20), "peak-heap-MiB")
		})
	}
}

// heapPeak samples the heap's live and unswept objects every millisecond
// from now on; the function it returns stops and returns the most seen
// above where it started.
func heapPeak(b *testing.B) func() uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	start, most := read(), uint64(0)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			most = max(most, read())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return max(most, start) - start
	}
}
