package editfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools/editfile"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

const source = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n\tprintln(\"bye\")\n}\n"

func TestEditFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, args string
		isErr      bool
		text       string
		want       string // main.go afterwards
		details    editfile.Details
	}{
		{"one match", `{"path":"main.go","old_text":"\"bye\"","new_text":"\"ciao\""}`, false,
			"Edited main.go: 1 replacement.", strings.Replace(source, "bye", "ciao", 1),
			editfile.Details{Path: "main.go", Replacements: 1, Diff: `--- a/main.go
+++ b/main.go
@@ -3,5 +3,5 @@
 func main() {
 	println("hi")
 	println("hi")
-	println("bye")
+	println("ciao")
 }
`}},
		{"replace all", `{"path":"main.go","old_text":"\"hi\"","new_text":"\"hey\"","replace_all":true}`, false,
			"Edited main.go: 2 replacements.", strings.ReplaceAll(source, `"hi"`, `"hey"`),
			editfile.Details{Path: "main.go", Replacements: 2, Diff: `--- a/main.go
+++ b/main.go
@@ -1,7 +1,7 @@
 package main
 
 func main() {
-	println("hi")
-	println("hi")
+	println("hey")
+	println("hey")
 	println("bye")
 }
`}},
		{"deleting text", `{"path":"main.go","old_text":"\tprintln(\"bye\")\n","new_text":""}`, false,
			"Edited main.go: 1 replacement.", strings.Replace(source, "\tprintln(\"bye\")\n", "", 1),
			editfile.Details{Path: "main.go", Replacements: 1, Diff: "--- a/main.go\n+++ b/main.go\n@@ -3,5 +3,4 @@\n func main() {\n \tprintln(\"hi\")\n \tprintln(\"hi\")\n-\tprintln(\"bye\")\n }\n"}},
		{"ambiguous", `{"path":"main.go","old_text":"println(\"hi\")","new_text":"x"}`, true,
			"old_text matches 2 times in main.go; set replace_all or give more context so it matches once", source, editfile.Details{}},
		{"not found", `{"path":"main.go","old_text":"println( \"hi\")","new_text":"x"}`, true,
			"old_text not found in main.go; it must match exactly, whitespace and indentation included (read the file again to see its current text)", source, editfile.Details{}},
		{"no change", `{"path":"main.go","old_text":"main","new_text":"main"}`, true,
			"old_text and new_text are the same; there is nothing to change", source, editfile.Details{}},
		{"missing file", `{"path":"nope.go","old_text":"a","new_text":"b"}`, true, "no such file or folder: nope.go", source, editfile.Details{}},
		{"folder", `{"path":"dir","old_text":"a","new_text":"b"}`, true, "dir is a folder, not a file", source, editfile.Details{}},
		{"binary", `{"path":"bin","old_text":"a","new_text":"b"}`, true, "bin is a binary file; edit_file changes text only", source, editfile.Details{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := wt.New(t, map[string]string{"main.go": source, "dir/x": "", "bin": "a\x00b"})
			res := wt.Call(t, editfile.New(e.WS), tt.args)
			if res.IsError != tt.isErr || wt.Text(res) != tt.text {
				t.Fatalf("result (error %v) %q; want (error %v) %q", res.IsError, wt.Text(res), tt.isErr, tt.text)
			}
			if got := e.Read(t, "main.go"); got != tt.want {
				t.Errorf("main.go:\n%s\nwant:\n%s", got, tt.want)
			}
			if tt.isErr {
				return
			}
			var d editfile.Details
			wt.Details(t, res, &d)
			if diff := cmp.Diff(tt.details, d); diff != "" {
				t.Errorf("details (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEditFileSchema(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	tool := editfile.New(e.WS)
	if !tool.Annotations.Destructive || tool.Annotations.ReadOnly {
		t.Errorf("annotations %+v; want destructive", tool.Annotations)
	}
	var schema struct {
		Properties map[string]struct {
			MinLength *int `json:"minLength"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if m := schema.Properties["old_text"].MinLength; m == nil || *m != 1 {
		t.Errorf("old_text may be empty: %s", tool.InputSchema)
	}
}

func TestEditFileEscapes(t *testing.T) {
	t.Parallel()
	for _, c := range wt.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			tool := editfile.New(c.WS)
			before := c.Outside(t)
			for name, p := range c.Refused {
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`,"old_text":"SECRET","new_text":"pwned"}`)
				if text := wt.Text(res); !res.IsError || !strings.Contains(text, "path escapes the workspace") {
					t.Errorf("%s (%q): error %v, %q; want an error result saying the path escapes", name, p, res.IsError, text)
				}
			}
			if diff := cmp.Diff(before, c.Outside(t)); diff != "" {
				t.Errorf("files outside the workspace changed (-before +after):\n%s", diff)
			}
			for name, p := range c.Accepted {
				c.Write(t, "..notes", wt.Inside)
				c.Write(t, "sub/deep/file.txt", wt.Inside)
				res := wt.Call(t, tool, `{"path":`+wt.Quote(p)+`,"old_text":"inside","new_text":"edited"}`)
				if res.IsError || (c.Read(t, "..notes") != "edited the workspace\n" && c.Read(t, "sub/deep/file.txt") != "edited the workspace\n") {
					t.Errorf("%s (%q): %q", name, p, wt.Text(res))
				}
			}
		})
	}
}

// TestEditFileLargeChange replaces every line of a 3,000-line file: the
// edit is made, and Details says why it carries no diff instead of running
// a quadratic line match over the whole change.
func TestEditFileLargeChange(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"big.txt": strings.Repeat("x\na\n", 3000)})
	res := wt.Call(t, editfile.New(e.WS), `{"path":"big.txt","old_text":"a","new_text":"b","replace_all":true}`)
	var d editfile.Details
	wt.Details(t, res, &d)
	want := editfile.Details{Path: "big.txt", Replacements: 3000, DiffOmitted: "the change spans 5999 lines, more than the 2000 a diff is made for"}
	if diff := cmp.Diff(want, d); diff != "" || res.IsError || e.Read(t, "big.txt") != strings.Repeat("x\nb\n", 3000) {
		t.Errorf("error %v, details (-want +got):\n%s", res.IsError, diff)
	}
}

// TestEditFileCancelled edits with a context already done: nothing is
// written and the context's error returned.
func TestEditFileCancelled(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"main.go": source})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := wt.CallContext(ctx, t, editfile.New(e.WS), `{"path":"main.go","old_text":"bye","new_text":"ciao"}`, nil)
	if !errors.Is(err, context.Canceled) || e.Read(t, "main.go") != source {
		t.Errorf("result %v, error %v, main.go:\n%s\nwant context.Canceled and main.go unchanged", res, err, e.Read(t, "main.go"))
	}
}
