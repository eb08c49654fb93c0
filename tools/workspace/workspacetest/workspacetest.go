// Package workspacetest builds temporary workspaces for the tests of the
// workspace tools: folders with files, the escape corpus (paths that must be
// refused and look-alikes that must be accepted), and a way to run one tool
// call with its arguments validated as the server would.
//
// It is for the workspace tools' tests: no non-test package may import it.
package workspacetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
)

// Env is a workspace in a temporary folder, beside files it must not reach.
type Env struct {
	WS     *workspace.Workspace
	Dir    string // the workspace folder: Parent/ws
	Parent string // holds the workspace and what lies outside it
}

// New makes a workspace holding files (slash paths relative to the
// workspace → content), and closes it when the test ends.
func New(tb testing.TB, files map[string]string) *Env {
	tb.Helper()
	parent, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	e := &Env{Parent: parent, Dir: filepath.Join(parent, "ws")}
	if err := os.Mkdir(e.Dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for name, content := range files {
		e.Write(tb, name, content)
	}
	ws, err := workspace.Open(e.Dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.Close() })
	e.WS = ws
	return e
}

// Write writes a file below the workspace folder, bypassing the workspace.
func (e *Env) Write(tb testing.TB, name, content string) {
	tb.Helper()
	p := filepath.Join(e.Dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Read returns a file's content below the workspace folder, or "<missing>".
func (e *Env) Read(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(e.Dir, filepath.FromSlash(name)))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

// Secret is the content of every file outside the workspace; a result that
// holds it has read outside.
const Secret = "SECRET outside the workspace"

// Corpus is the escape corpus over a workspace.
type Corpus struct {
	*Env
	// Kind names the corpus: "shared" for a workspace folder of its own,
	// "session" for one session's folder beside another session's.
	Kind string
	// Other is the sibling folder holding a secret: Parent/ws-other beside
	// a shared workspace, the other session's folder beside a session's.
	Other string
	// Refused are paths that lead outside the workspace: by .., by an
	// absolute path, by a symlink or a chain of them, into the sibling
	// folder, or holding a NUL byte.
	Refused map[string]string // name → path
	// Accepted are paths that look suspicious but stay inside; each names a
	// file whose content is Inside.
	Accepted map[string]string
}

// Inside is the content of the files the accepted paths name.
const Inside = "inside the workspace\n"

// NewCorpus builds a workspace with the escape corpus around it:
//
//	Parent/outside.txt          Secret
//	Parent/ws-other/secret.txt  Secret (the sibling)
//	Parent/ws/..notes           Inside
//	Parent/ws/sub/deep/file.txt Inside
//	Parent/ws/link-in         → sub/deep/file.txt
//	Parent/ws/link-out        → ../outside.txt
//	Parent/ws/link-abs        → Parent/outside.txt
//	Parent/ws/chain1 → chain2 → chain3 → ../ws-other/secret.txt
//	Parent/ws/dir-out         → ..
//	Parent/ws/dir-sibling     → ../ws-other
func NewCorpus(tb testing.TB) *Corpus {
	tb.Helper()
	e := New(tb, nil)
	other := filepath.Join(e.Parent, "ws-other")
	if err := os.Mkdir(other, 0o755); err != nil {
		tb.Fatal(err)
	}
	return corpus(tb, e, "shared", other)
}

// NewSessionCorpus builds the escape corpus around one session's workspace
// of a workspace.Sessions: the same layout as NewCorpus with Parent the
// sessions' root, ws the folder of session "alice" and ws-other the folder
// of session "bob", both made by the Sessions resolver and held until the
// test ends.
func NewSessionCorpus(tb testing.TB) *Corpus {
	tb.Helper()
	parent, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := workspace.OpenSessions(parent, workspace.SessionOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	resolve := func(id string) *workspace.Workspace {
		call := tools.NewCall("call-1", "resolve", nil, nil)
		call.SessionID = id
		ws, release, err := s.Resolve(call)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(release)
		return ws
	}
	alice, bob := resolve("alice"), resolve("bob")
	e := &Env{WS: alice, Dir: alice.Dir(), Parent: parent}
	return corpus(tb, e, "session", bob.Dir())
}

// Corpora returns both corpora, so an escape test runs over each.
func Corpora(tb testing.TB) []*Corpus {
	tb.Helper()
	return []*Corpus{NewCorpus(tb), NewSessionCorpus(tb)}
}

// corpus lays the escape corpus out around e's workspace, with other as
// the sibling folder.
func corpus(tb testing.TB, e *Env, kind, other string) *Corpus {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	e.Write(tb, "..notes", Inside)
	e.Write(tb, "sub/deep/file.txt", Inside)
	sibling := filepath.Base(other)
	must(os.WriteFile(filepath.Join(e.Parent, "outside.txt"), []byte(Secret), 0o644))
	must(os.WriteFile(filepath.Join(other, "secret.txt"), []byte(Secret), 0o644))
	for link, target := range map[string]string{
		"link-in":     "sub/deep/file.txt",
		"link-out":    "../outside.txt",
		"link-abs":    filepath.Join(e.Parent, "outside.txt"),
		"chain1":      "chain2",
		"chain2":      "chain3",
		"chain3":      "../" + sibling + "/secret.txt",
		"dir-out":     "..",
		"dir-sibling": "../" + sibling,
	} {
		must(os.Symlink(target, filepath.Join(e.Dir, link)))
	}
	return &Corpus{
		Env:   e,
		Kind:  kind,
		Other: other,
		Refused: map[string]string{
			"dot dot":                 "..",
			"dot dot file":            "../outside.txt",
			"down and up":             "sub/../../outside.txt",
			"a/../../x":               "a/../../outside.txt",
			"absolute outside":        filepath.Join(e.Parent, "outside.txt"),
			"absolute sibling":        filepath.Join(other, "secret.txt"),
			"relative sibling":        "../" + sibling + "/secret.txt",
			"symlink out":             "link-out",
			"absolute symlink":        "link-abs",
			"chain of symlinks":       "chain1",
			"through dir symlink":     "dir-out/outside.txt",
			"through sibling symlink": "dir-sibling/secret.txt",
			"sibling via dir symlink": "dir-out/" + sibling + "/secret.txt",
			"NUL byte":                "sub/deep/file.txt\x00.png",
		},
		Accepted: map[string]string{
			"name starting with ..": "..notes",
			"symlink inside":        "link-in",
			"nested folders":        "sub/deep/file.txt",
			"redundant parts":       "./sub/../sub/deep//file.txt",
			"absolute inside":       filepath.Join(e.Dir, "sub", "deep", "file.txt"),
		},
	}
}

// Outside returns everything outside the workspace folder (the parent
// itself included) with its metadata (type and mode, owner, modification
// time, extended attributes) and, for files, its content: to show that
// nothing outside was written or changed.
func (e *Env) Outside(tb testing.TB) map[string]string {
	tb.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(e.Parent, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p == e.Dir:
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		meta := fmt.Sprintf("%o %d:%d %d.%09d", st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		if d.Type()&fs.ModeSymlink == 0 {
			buf := make([]byte, 1024)
			if n, err := syscall.Listxattr(p, buf); err == nil && n > 0 {
				meta += " xattrs " + strings.ReplaceAll(string(buf[:n]), "\x00", ",")
			}
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			meta += " " + string(b)
		}
		files[strings.TrimPrefix(p, e.Parent)] = meta
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files
}

// Call runs one call of t with arguments, validated against t's schema as
// the server would; invalid arguments fail the test.
func Call(tb testing.TB, t tools.Tool, arguments string) *tools.Result {
	tb.Helper()
	res, err := CallContext(context.Background(), tb, t, arguments, nil)
	if err != nil {
		tb.Fatalf("%s %s: %v", t.Name, arguments, err)
	}
	return res
}

// CallContext runs one call of t under ctx, reporting progress to report
// (which may be nil), and returns the handler's result and error.
func CallContext(ctx context.Context, tb testing.TB, t tools.Tool, arguments string, report func(tools.Progress)) (*tools.Result, error) {
	tb.Helper()
	reg, err := tools.NewRegistry(t)
	if err != nil {
		tb.Fatal(err)
	}
	tool, _ := reg.Snapshot().Lookup(t.Name)
	args, err := tool.ValidateArguments(arguments)
	if err != nil {
		tb.Fatalf("%s %s: %v", t.Name, arguments, err)
	}
	call := tools.NewCall("call-1", t.Name, args, report)
	defer call.Close()
	return tool.Handler(ctx, call)
}

// Text is the text of a result's blocks.
func Text(r *tools.Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// Details decodes a result's details into v.
func Details(tb testing.TB, r *tools.Result, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.Details, v); err != nil {
		tb.Fatalf("details %s: %v", r.Details, err)
	}
}

// Expect runs one call of t with arguments (see Call) and checks its
// result: the error flag and text, and, when it succeeded, its details
// against want.
func Expect[D any](tb testing.TB, t tools.Tool, arguments string, isErr bool, text string, want D) {
	tb.Helper()
	res := Call(tb, t, arguments)
	if res.IsError != isErr || Text(res) != text {
		tb.Fatalf("result (error %v):\n%s\nwant (error %v):\n%s", res.IsError, Text(res), isErr, text)
	}
	if isErr {
		return
	}
	var got D
	Details(tb, res, &got)
	if diff := cmp.Diff(want, got); diff != "" {
		tb.Errorf("details (-want +got):\n%s", diff)
	}
}

// Quote returns s as a JSON string.
func Quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Runner returns a function that runs calls of t as Call does, with t's
// schema compiled once, for benchmarks.
func Runner(tb testing.TB, t tools.Tool) func(arguments string) *tools.Result {
	tb.Helper()
	reg, err := tools.NewRegistry(t)
	if err != nil {
		tb.Fatal(err)
	}
	tool, _ := reg.Snapshot().Lookup(t.Name)
	return func(arguments string) *tools.Result {
		args, err := tool.ValidateArguments(arguments)
		if err != nil {
			tb.Fatalf("%s %s: %v", t.Name, arguments, err)
		}
		res, err := tool.Handler(context.Background(), tools.NewCall("call-1", t.Name, args, nil))
		if err != nil {
			tb.Fatalf("%s %s: %v", t.Name, arguments, err)
		}
		return res
	}
}

// Deep makes a chain of levels folders named d below the workspace folder,
// d/d/…/d, holding a file named leaf at its bottom, and removes it when the
// test ends. It works one level at a time through a handle on the level
// above, as a program that changes into each folder would, so neither its
// cost nor the path length grows with the depth; os.RemoveAll cannot remove
// so deep a tree (it holds a file descriptor per level), hence the cleanup
// of its own.
func (e *Env) Deep(tb testing.TB, levels int, leaf string) {
	tb.Helper()
	r, err := os.OpenRoot(e.Dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { removeChain(tb, e.Dir) })
	for range levels {
		if err := r.Mkdir("d", 0o755); err != nil {
			r.Close()
			tb.Fatal(err)
		}
		next, err := r.OpenRoot("d")
		r.Close()
		if err != nil {
			tb.Fatal(err)
		}
		r = next
	}
	defer r.Close()
	if err := r.WriteFile(leaf, []byte(Inside), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// removeChain removes the chain Deep made below dir with rm -rf, which
// walks a tree of any depth one level at a time.
func removeChain(tb testing.TB, dir string) {
	if out, err := exec.Command("rm", "-rf", filepath.Join(dir, "d")).CombinedOutput(); err != nil {
		tb.Errorf("removing the deep chain: %v\n%s", err, out)
	}
}

// OutOfFiles leaves the process with only leave file descriptors free, as
// a server that has (nearly) run out of them (EMFILE), until the test ends
// or the returned function is called. It lowers the soft RLIMIT_NOFILE and
// fills what is left under it, so it must not run beside parallel tests.
func OutOfFiles(tb testing.TB, leave int) (release func()) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	low := lim
	low.Cur = min(lim.Cur, 256)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		tb.Fatal(err)
	}
	var held []int
	for len(held) < int(low.Cur) {
		fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break // EMFILE: none left
		}
		held = append(held, fd)
	}
	for range min(leave, len(held)) {
		syscall.Close(held[len(held)-1])
		held = held[:len(held)-1]
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		for _, fd := range held {
			syscall.Close(fd)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			tb.Error(err)
		}
	}
	tb.Cleanup(release)
	return release
}
