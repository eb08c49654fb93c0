package writefile_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
	"github.com/toolwire/toolwire/tools/writefile"
)

func TestWriteFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, args string
		isErr      bool
		text       string
		details    writefile.Details
		file, want string // a file to check afterwards and its content
	}{
		{"create with folders", `{"path":"a/b/new.txt","content":"hello\n"}`, false, "Created a/b/new.txt (6 bytes).",
			writefile.Details{Path: "a/b/new.txt", BytesWritten: 6, Action: "created"}, "a/b/new.txt", "hello\n"},
		{"replace", `{"path":"old.txt","content":"new"}`, false, "Replaced old.txt (3 bytes).",
			writefile.Details{Path: "old.txt", BytesWritten: 3, Action: "replaced"}, "old.txt", "new"},
		{"empty content", `{"path":"old.txt","content":""}`, false, "Replaced old.txt (0 bytes).",
			writefile.Details{Path: "old.txt", Action: "replaced"}, "old.txt", ""},
		{"path cleaned", `{"path":"./x/../y.txt","content":"y"}`, false, "Created y.txt (1 bytes).",
			writefile.Details{Path: "y.txt", BytesWritten: 1, Action: "created"}, "y.txt", "y"},
		{"folder", `{"path":"dir","content":"x"}`, true, "dir is a folder, not a file", writefile.Details{}, "dir/keep", "k"},
		{"workspace itself", `{"path":".","content":"x"}`, true, ". is the workspace folder, not a file", writefile.Details{}, "old.txt", "old"},
		{"below a file", `{"path":"old.txt/x","content":"x"}`, true, "not a folder: a parent of old.txt/x is a file", writefile.Details{}, "old.txt", "old"},
		{"64 levels", `{"path":"` + strings.Repeat("d/", 63) + `f","content":"x"}`, false, "Created " + strings.Repeat("d/", 63) + "f (1 bytes).",
			writefile.Details{Path: strings.Repeat("d/", 63) + "f", BytesWritten: 1, Action: "created"}, strings.Repeat("d/", 63) + "f", "x"},
		{"20,001 levels", `{"path":"` + strings.Repeat("d/", 20_000) + `f","content":"x"}`, true,
			strings.Repeat("d/", 40) + "… is 20001 levels deep, more than write_file's limit of 64", writefile.Details{}, strings.Repeat("d/", 20_000) + "f", "<missing>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := wt.New(t, map[string]string{"old.txt": "old", "dir/keep": "k"})
			res := wt.Call(t, writefile.New(e.WS), tt.args)
			if res.IsError != tt.isErr || wt.Text(res) != tt.text {
				t.Fatalf("result (error %v) %q; want (error %v) %q", res.IsError, wt.Text(res), tt.isErr, tt.text)
			}
			if got := e.Read(t, tt.file); got != tt.want {
				t.Errorf("%s holds %q; want %q", tt.file, got, tt.want)
			}
			if tt.isErr {
				return
			}
			var d writefile.Details
			wt.Details(t, res, &d)
			if diff := cmp.Diff(tt.details, d); diff != "" {
				t.Errorf("details (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteFileEscapes writes to every refused path: each is an error result
// and nothing outside the workspace changes. The accepted paths are written.
func TestWriteFileEscapes(t *testing.T) {
	t.Parallel()
	for _, c := range wt.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			tool := writefile.New(c.WS)
			before := c.Outside(t)
			for name, p := range c.Refused {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`,"content":"pwned"}`)
				if !res.IsError || !strings.Contains(wt.Text(res), "path escapes the workspace") {
					t.Errorf("%s (%q): error %v, %q; want an error result saying the path escapes", name, p, res.IsError, wt.Text(res))
				}
			}
			if diff := cmp.Diff(before, c.Outside(t)); diff != "" {
				t.Errorf("files outside the workspace changed (-before +after):\n%s", diff)
			}
			for name, p := range c.Accepted {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`,"content":"written"}`)
				if res.IsError {
					t.Errorf("%s (%q): %q", name, p, wt.Text(res))
				}
			}
			if got := c.Read(t, "sub/deep/file.txt"); got != "written" {
				t.Errorf("sub/deep/file.txt holds %q", got)
			}
			if got := c.Read(t, "..notes"); got != "written" {
				t.Errorf("..notes holds %q", got)
			}
		})
	}
}

// TestWriteFileLongNames writes files with names up to the file system's 255
// bytes (the temporary file's name must fit too), and refuses longer ones,
// leaving no temporary file behind either way.
func TestWriteFileLongNames(t *testing.T) {
	t.Parallel()
	for _, n := range []int{232, 233, 250, 255, 256} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			e := wt.New(t, nil)
			for _, name := range []string{strings.Repeat("n", n), "sub/" + strings.Repeat("é", n/2) + strings.Repeat("n", n%2)} {
				res := wt.Call(t, writefile.New(e.WS), fmt.Sprintf(`{"path":%q,"content":"long"}`, name))
				if n <= 255 {
					if res.IsError || e.Read(t, name) != "long" {
						t.Errorf("a name of %d bytes: %q", n, wt.Text(res))
					}
				} else if !res.IsError {
					t.Errorf("a name of %d bytes: %q; want an error", n, wt.Text(res))
				}
			}
			_ = filepath.WalkDir(e.Dir, func(p string, d fs.DirEntry, _ error) error {
				if strings.Contains(p, ".toolwire-") {
					t.Errorf("temporary file left: %.60s…", filepath.Base(p))
				}
				return nil
			})
		})
	}
}
