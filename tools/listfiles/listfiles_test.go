package listfiles_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
