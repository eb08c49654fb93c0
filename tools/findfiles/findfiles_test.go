package findfiles_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools/findfiles"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

func TestFindFiles(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{
		"main.go":           "package main\n\nfunc main() {}\n",
		"cmd/tool/tool.go":  "package main\n// TODO: flags\nfunc run() {}\n",
		"cmd/tool/tool.txt": "TODO: docs\n",
		"pkg/a/a.go":        "package a\n\n// TODO(x): one\n// TODO(y): two\n",
		"pkg/a/a_test.go":   "package a\n",
		"bin/tool":          "\x00TODO",
	})
	tool := findfiles.New(e.WS, findfiles.Options{MaxMatches: 3, MaxLineBytes: 14})
	tests := []struct {
		name, args string
		isErr      bool
		text       string
		details    findfiles.Details
	}{
		{"** glob", `{"pattern":"**/*.go"}`, false, "main.go\ncmd/tool/tool.go\npkg/a/a.go\npkg/a/a_test.go\n",
			findfiles.Details{Pattern: "**/*.go", Files: []string{"main.go", "cmd/tool/tool.go", "pkg/a/a.go", "pkg/a/a_test.go"}}},
		{"one folder", `{"pattern":"pkg/a/*_test.go"}`, false, "pkg/a/a_test.go\n",
			findfiles.Details{Pattern: "pkg/a/*_test.go", Files: []string{"pkg/a/a_test.go"}}},
		{"alternatives, ./ prefix", `{"pattern":"./cmd/**/*.{go,txt}"}`, false, "cmd/tool/tool.go\ncmd/tool/tool.txt\n",
			findfiles.Details{Pattern: "./cmd/**/*.{go,txt}", Files: []string{"cmd/tool/tool.go", "cmd/tool/tool.txt"}}},
		{"content", `{"pattern":"**/*.go","content":"TODO\\(x\\)|func run"}`, false, "cmd/tool/tool.go:3: func run() {}\npkg/a/a.go:3: // TODO(x): on…\n",
			findfiles.Details{Pattern: "**/*.go", Content: `TODO\(x\)|func run`, Files: []string{"cmd/tool/tool.go", "pkg/a/a.go"},
				Matches: []findfiles.Match{{Path: "cmd/tool/tool.go", Line: 3, Text: "func run() {}"}, {Path: "pkg/a/a.go", Line: 3, Text: "// TODO(x): on…"}}}},
		{"match cap; binary files skipped", `{"pattern":"**","content":"TODO"}`, false,
			"cmd/tool/tool.go:2: // TODO: flags\ncmd/tool/tool.txt:1: TODO: docs\npkg/a/a.go:3: // TODO(x): on…\n[truncated: the first 3 files and 3 lines; narrow the pattern to see the rest]\n[not searched: 1 binary file]\n",
			findfiles.Details{Pattern: "**", Content: "TODO", Truncated: true, SkippedBinary: 1, Files: []string{"cmd/tool/tool.go", "cmd/tool/tool.txt", "pkg/a/a.go"},
				Matches: []findfiles.Match{{Path: "cmd/tool/tool.go", Line: 2, Text: "// TODO: flags"}, {Path: "cmd/tool/tool.txt", Line: 1, Text: "TODO: docs"}, {Path: "pkg/a/a.go", Line: 3, Text: "// TODO(x): on…"}}}},
		{"nothing", `{"pattern":"**/*.rs"}`, false, "no files match **/*.rs\n", findfiles.Details{Pattern: "**/*.rs", Files: []string{}}},
		{"no line", `{"pattern":"*.go","content":"nothing here"}`, false, "no line matches \"nothing here\" in files matching *.go\n",
			findfiles.Details{Pattern: "*.go", Content: "nothing here", Files: []string{}}},
		{"bad pattern", `{"pattern":"[a-"}`, true, `pattern "[a-" is not a valid glob pattern`, findfiles.Details{}},
		{"bad regexp", `{"pattern":"*","content":"("}`, true, "content is not a valid regular expression: error parsing regexp: missing closing ): `(`", findfiles.Details{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wt.Expect(t, tool, tt.args, tt.isErr, tt.text, tt.details)
		})
	}
}

// TestFindFilesSkippedFiles: a content search whose files were all passed
// over says how many and why, rather than only that no line matches (as
// it did before); files passed over beside matches are counted too.
// TestFindFilesNamesCannotForgeLines finds files whose names a command
// made to forge lines of the result: each is shown quoted.
func TestFindFilesNamesCannotForgeLines(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{
		"a\nz.go":      "TODO\n",
		"b\x1b]0;x.go": "TODO\n",
	})
	tool := findfiles.New(e.WS, findfiles.Options{})
	wt.Expect(t, tool, `{"pattern":"*.go"}`, false, `"a\nz.go"`+"\n"+`"b\x1b]0;x.go"`+"\n",
		findfiles.Details{Pattern: "*.go", Files: []string{"a\nz.go", "b\x1b]0;x.go"}})
	wt.Expect(t, tool, `{"pattern":"*.go","content":"TODO"}`, false, `"a\nz.go":1: TODO`+"\n"+`"b\x1b]0;x.go":1: TODO`+"\n",
		findfiles.Details{Pattern: "*.go", Content: "TODO", Files: []string{"a\nz.go", "b\x1b]0;x.go"},
			Matches: []findfiles.Match{{Path: "a\nz.go", Line: 1, Text: "TODO"}, {Path: "b\x1b]0;x.go", Line: 1, Text: "TODO"}}})
}

func TestFindFilesSkippedFiles(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("needle\n", 1<<20/7+1) // just over 1 MiB
	e := wt.New(t, map[string]string{"a.log": big, "b.log": big, "c.log": "\x00needle", "d.txt": "needle\n"})
	tool := findfiles.New(e.WS, findfiles.Options{MaxFileBytes: 1 << 20})
	wt.Expect(t, tool, `{"pattern":"*.log","content":"needle"}`, false,
		"no line matches \"needle\" in files matching *.log\n[not searched: 2 files over 1 MiB, find_files's limit for a content search; 1 binary file]\n",
		findfiles.Details{Pattern: "*.log", Content: "needle", Files: []string{}, SkippedLarge: 2, SkippedBinary: 1})
	wt.Expect(t, tool, `{"pattern":"*","content":"needle"}`, false,
		"d.txt:1: needle\n[not searched: 2 files over 1 MiB, find_files's limit for a content search; 1 binary file]\n",
		findfiles.Details{Pattern: "*", Content: "needle", Files: []string{"d.txt"}, Matches: []findfiles.Match{{Path: "d.txt", Line: 1, Text: "needle"}}, SkippedLarge: 2, SkippedBinary: 1})
}

func TestFindFilesFileCap(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 10 {
		files[fmt.Sprintf("f%d.txt", i)] = "x\n"
	}
	e := wt.New(t, files)
	res := wt.Call(t, findfiles.New(e.WS, findfiles.Options{MaxFiles: 4}), `{"pattern":"*.txt"}`)
	want := "f0.txt\nf1.txt\nf2.txt\nf3.txt\n[truncated: the first 4 files and 0 lines; narrow the pattern to see the rest]\n"
	if wt.Text(res) != want {
		t.Errorf("text:\n%s\nwant:\n%s", wt.Text(res), want)
	}
}

// TestFindFilesEscapes searches with patterns that lead outside and over a
// workspace whose symlinks lead outside: nothing outside is found or read.
func TestFindFilesEscapes(t *testing.T) {
	t.Parallel()
	for _, c := range wt.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			tool := findfiles.New(c.WS, findfiles.Options{})
			for _, p := range []string{"../*", "../" + filepath.Base(c.Other) + "/*", "sub/../../*", c.Parent + "/*", "/etc/*"} {
				res := wt.Call(t, tool, `{"pattern":`+wt.Quote(p)+`}`)
				if text := wt.Text(res); !res.IsError || !strings.Contains(text, "path escapes the workspace") {
					t.Errorf("%q: error %v, %q; want an error result saying it escapes", p, res.IsError, text)
				}
			}
			for _, p := range []string{"**", "dir-out/*", "dir-out/**", "link-out", "chain1"} {
				res := wt.Call(t, tool, `{"pattern":`+wt.Quote(p)+`,"content":"SECRET|inside"}`)
				text := wt.Text(res)
				if res.IsError || strings.Contains(text, wt.Secret) || strings.Contains(text, "outside.txt") {
					t.Errorf("%q: error %v, found outside:\n%s", p, res.IsError, text)
				}
			}
			res := wt.Call(t, tool, `{"pattern":"**","content":"inside"}`)
			if want := "..notes:1: inside the workspace\nlink-in:1: inside the workspace\nsub/deep/file.txt:1: inside the workspace\n"; wt.Text(res) != want {
				t.Errorf("text:\n%s\nwant:\n%s", wt.Text(res), want)
			}
		})
	}
}

// BenchmarkFindFiles globs a tree of 10,000 files (100 folders of 100), with
// and without a content search.
func BenchmarkFindFiles(b *testing.B) {
	e := wt.New(b, nil)
	for d := range 100 {
		dir := filepath.Join(e.Dir, fmt.Sprintf("pkg%02d", d), "src")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			ext := ".go"
			if f%2 == 1 {
				ext = ".txt"
			}
			content := fmt.Sprintf("package p%d\n\nfunc F%d() {}\n", d, f)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%03d%s", f, ext)), []byte(content), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := wt.Runner(b, findfiles.New(e.WS, findfiles.Options{MaxFiles: 20000, MaxMatches: 20000}))
	for _, bb := range []struct{ name, args string }{
		{"glob", `{"pattern":"**/*.go"}`},
		{"glob+content", `{"pattern":"**/*.go","content":"func F4\\d\\("}`},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res := run(bb.args)
				if res.IsError {
					b.Fatal(wt.Text(res))
				}
			}
		})
	}
}

// TestFindFilesCancelled searches with a context already done: the search
// stops and returns the context's error.
func TestFindFilesCancelled(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"a/b/c.txt": "x"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := wt.CallContext(ctx, t, findfiles.New(e.WS, findfiles.Options{}), `{"pattern":"**/*.none"}`, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("result %v, error %v; want context.Canceled", res, err)
	}
}

// TestFindFilesAlternatives refuses, as invalid arguments naming the limit,
// patterns whose {a,b} groups expand past MaxAlternatives, counting groups
// in sequence as products and nested ones as sums, and leaving escaped
// braces and braces in classes out.
func TestFindFilesAlternatives(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"ac.txt": "x"})
	tool := findfiles.New(e.WS, findfiles.Options{MaxAlternatives: 6})
	for _, tt := range []struct {
		pattern string
		refused bool
	}{
		{"{a,b}{c,d,e}.txt", false},   // 6
		{"{a,b}{c,d,e,f}.txt", true},  // 8
		{"{a,{b,c}}{c,d}.txt", false}, // 3 × 2
		{"{a,{b,c,d}}{c,d}.txt", true},
		{`\{a,b,c,d,e,f,g\}{a,b}*`, false}, // escaped: 2
		{"[{]{a,b}{c,d}*", false},          // in a class: 4
		{"{a,b}/{a,b}/{a,b}/*", true},      // 8 across folders
	} {
		res := wt.Call(t, tool, `{"pattern":`+wt.Quote(tt.pattern)+`}`)
		text := wt.Text(res)
		switch {
		case tt.refused && (!res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) || !strings.Contains(text, "more than 6 alternatives")):
			t.Errorf("%s: error %v kind %d %q; want INVALID_ARGUMENTS naming the limit of 6", tt.pattern, res.IsError, res.ErrorKind, text)
		case !tt.refused && res.IsError:
			t.Errorf("%s: refused: %s", tt.pattern, text)
		}
	}
	// The repro: 40 groups of two, 2^40 walks, with the defaults.
	res := wt.Call(t, findfiles.New(e.WS, findfiles.Options{}), `{"pattern":"`+strings.Repeat("{a,b}", 40)+`"}`)
	if want := "more than 1024 alternatives"; !res.IsError || !strings.Contains(wt.Text(res), want) {
		t.Errorf("40 groups: %q; want an error saying %q", wt.Text(res), want)
	}
}

// TestFindFilesDeepTree searches a workspace holding a chain of 2,000
// folders: the walk passes over what lies below MaxDepth and says so,
// instead of resolving ever longer paths (2,000 levels cost 2 million
// look-ups; the 20,000 of the repro, internal/testing/e2e's case, 200
// million). The context's deadline only keeps a regression from hanging
// the test.
func TestFindFilesDeepTree(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"top.txt": "needle\n"})
	e.Deep(t, 2_000, "deep.txt")
	tool := findfiles.New(e.WS, findfiles.Options{})
	for _, args := range []string{`{"pattern":"**/*.txt"}`, `{"pattern":"**","content":"needle|inside"}`} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := wt.CallContext(ctx, t, tool, args, nil)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v; want a result before the context's end", args, err)
		}
		var d findfiles.Details
		wt.Details(t, res, &d)
		text := wt.Text(res)
		if !strings.HasPrefix(text, "top.txt") || !strings.Contains(text, "[stopped early: depth limit: paths more than 64 levels deep were not searched;") ||
			!slices.Equal(d.Stopped, []string{"depth limit"}) || !slices.Equal(d.Files, []string{"top.txt"}) {
			t.Errorf("%s: %s\ndetails %+v; want top.txt only, stopped early at the depth limit", args, text, d)
		}
	}
}

// TestFindFilesWorkLimits stops a search at each limit on its work, with
// what it found so far and the reason in its text and details.
func TestFindFilesWorkLimits(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a/b/c/d.txt": "x\n"}
	for i := range 10 {
		files[fmt.Sprintf("f%d.txt", i)] = "match\n"
	}
	e := wt.New(t, files)
	for _, tt := range []struct {
		name  string
		opts  findfiles.Options
		args  string
		files int
		want  string
	}{
		// The look-ups of "." leave none of its entries in the limit.
		{"entries", findfiles.Options{MaxEntries: 2}, `{"pattern":"**/*.txt"}`, 0, "entry limit: the search looked at 2 files and folders, its limit"},
		{"depth", findfiles.Options{MaxDepth: 3}, `{"pattern":"**/*.txt"}`, 10, "depth limit: paths more than 3 levels deep were not searched"},
		{"content files", findfiles.Options{MaxScanFiles: 3}, `{"pattern":"*.txt","content":"match"}`, 3, "content file limit: the contents of 3 files were searched, the limit"},
		{"content bytes", findfiles.Options{MaxScanBytes: 15}, `{"pattern":"*.txt","content":"match"}`, 2, "content byte limit: 15 bytes of content were searched, the limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := wt.Call(t, findfiles.New(e.WS, tt.opts), tt.args)
			var d findfiles.Details
			wt.Details(t, res, &d)
			reason, _, _ := strings.Cut(tt.want, ":")
			if text := wt.Text(res); res.IsError || !strings.Contains(text, "[stopped early: "+tt.want+"; narrow the pattern to search the rest]") ||
				len(d.Files) != tt.files || !slices.Equal(d.Stopped, []string{reason}) {
				t.Errorf("error %v, %d files, stopped %q:\n%s\nwant %d files, stopped early at %q", res.IsError, len(d.Files), d.Stopped, text, tt.files, tt.want)
			}
		})
	}
}

// TestFindFilesEntryLimitInAFolder searches a folder holding more entries
// than the search may read: the files read before the limit are found and
// the search says where it stopped. It said "no files match wide/*", as if
// the folder were empty, when the limit fell inside the folder.
func TestFindFilesEntryLimitInAFolder(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 1000 {
		files[fmt.Sprintf("wide/f%03d", i)] = ""
	}
	e := wt.New(t, files)
	// 300 look-ups: wide, then 299 of its entries, read in batches of 256.
	res := wt.Call(t, findfiles.New(e.WS, findfiles.Options{MaxEntries: 300}), `{"pattern":"wide/*"}`)
	var d findfiles.Details
	wt.Details(t, res, &d)
	text := wt.Text(res)
	if res.IsError || len(d.Files) != 299 || !slices.IsSorted(d.Files) || !slices.Equal(d.Stopped, []string{"entry limit"}) ||
		!strings.HasPrefix(text, d.Files[0]+"\n") || strings.Contains(text, "no files match") ||
		!strings.HasSuffix(text, "\n[stopped early: entry limit: the search looked at 300 files and folders, its limit; narrow the pattern to search the rest]\n") {
		t.Fatalf("error %v, %d files, stopped %q:\n%s\nwant 299 files of wide, in order, stopped early at the entry limit", res.IsError, len(d.Files), d.Stopped, text)
	}
	for _, f := range d.Files {
		if _, ok := files[f]; !ok {
			t.Errorf("found %q, not a file of wide", f)
		}
	}
}

// TestFindFilesNamedPipes searches a workspace holding a named pipe, as a
// file that matches and as a folder a pattern names: nothing waits for a
// writer.
func TestFindFilesNamedPipes(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"a.txt": "match\n"})
	if err := syscall.Mkfifo(filepath.Join(e.Dir, "pipe.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	tool := findfiles.New(e.WS, findfiles.Options{})
	for _, args := range []string{`{"pattern":"*.txt","content":"match"}`, `{"pattern":"pipe.txt/*","content":"match"}`} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := wt.CallContext(ctx, t, tool, args, nil)
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %v; want a result", args, res, err)
		}
		var d findfiles.Details
		wt.Details(t, res, &d)
		if slices.Contains(d.Files, "pipe.txt") {
			t.Errorf("%s: found %q; want the pipe passed over", args, d.Files)
		}
	}
}

// TestFindFilesContentComplexity refuses, as invalid arguments, a content
// expression whose compiled program is over MaxContentInsts: matching it
// cannot be interrupted, and costs a step per instruction per byte.
func TestFindFilesContentComplexity(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"a.txt": "word word z\n"})
	tool := findfiles.New(e.WS, findfiles.Options{})
	res := wt.Call(t, tool, `{"pattern":"*.txt","content":"(?:\\w+\\s*){1,1000}z"}`)
	if text := wt.Text(res); !res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) ||
		!strings.Contains(text, "is too complex: it compiles to 5002 instructions, over find_files's limit of 500") {
		t.Errorf("error %v kind %d %q; want INVALID_ARGUMENTS naming the limit", res.IsError, res.ErrorKind, text)
	}
	res = wt.Call(t, tool, `{"pattern":"*.txt","content":"(?:\\w+\\s*){1,90}z"}`)
	if text := wt.Text(res); res.IsError || text != "a.txt:1: word word z\n" {
		t.Errorf("error %v %q; want the line found", res.IsError, text)
	}
}

// TestFindFilesOutOfFiles: a server out of file descriptors cannot open
// the workspace's folders or files; the search says so rather than
// answering that no files or lines match (it did: a walk passed every
// failed look-up over as "not there"). Not parallel: it takes every
// descriptor of the process.
func TestFindFilesOutOfFiles(t *testing.T) {
	e := wt.New(t, map[string]string{"a.txt": "hello\n", "sub/b.txt": "hello\n"})
	tool := findfiles.New(e.WS, findfiles.Options{})
	for _, args := range []string{`{"pattern":"**/*.txt"}`, `{"pattern":"*.txt","content":"hello"}`, `{"pattern":"sub/*.txt"}`} {
		release := wt.OutOfFiles(t, 0)
		res := wt.Call(t, tool, args)
		release()
		if text := wt.Text(res); !res.IsError || !strings.Contains(text, "too many open files") || strings.Contains(text, "no files match") || strings.Contains(text, "no line matches") {
			t.Errorf("%s out of files: is_error %v, %q; want an error saying the server is out of open files", args, res.IsError, text)
		}
		if res := wt.Call(t, tool, args); res.IsError || !strings.Contains(wt.Text(res), "b.txt") && !strings.Contains(wt.Text(res), "a.txt") {
			t.Errorf("%s with files free again: %q", args, wt.Text(res))
		}
	}
}
