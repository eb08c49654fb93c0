package workspacetools_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
	"github.com/toolwire/toolwire/tools/workspacetools"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve serves the workspace tools over a real loopback TCP listener and
// returns a client of it; both stop when the test ends.
func serve(t *testing.T, e *wt.Env, opts workspacetools.Options) *client.Client {
	t.Helper()
	return serveResolver(t, e.WS, opts)
}

// serveResolver is serve over the workspaces ws gives the calls.
func serveResolver(t *testing.T, ws workspace.Resolver, opts workspacetools.Options) *client.Client {
	t.Helper()
	c, _ := serveAddr(t, ws, opts)
	return c
}

// serveAddr is serveResolver, also returning the server's address.
func serveAddr(t *testing.T, ws workspace.Resolver, opts workspacetools.Options) (*client.Client, string) {
	t.Helper()
	reg, err := tools.NewRegistry(workspacetools.Tools(ws, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	s := loopback.Serve(t, reg, grpcserve.Config{})
	return s.Client, s.Addr
}

// lanes writes a plan as P(n) for a parallel lane of n calls and S(n) for
// a sequential one.
func lanes(acc *toolwirev1.BatchAccepted) []string {
	var got []string
	for _, l := range acc.GetLanes() {
		kind := "S"
		if l.GetParallel() {
			kind = "P"
		}
		got = append(got, fmt.Sprintf("%s(%d)", kind, len(l.GetCallIds())))
	}
	return got
}

// TestBatchLanes sends read_file×3, write_file, read_file through
// ExecuteBatch: the reads share a parallel lane, the write runs alone, and
// the last read sees what it wrote.
func TestBatchLanes(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	c := serve(t, e, workspacetools.Options{})
	b, err := client.Collect(c.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("r1", "read_file", map[string]any{"path": "a.txt"}),
		client.Call("r2", "read_file", map[string]any{"path": "b.txt"}),
		client.Call("r3", "read_file", map[string]any{"path": "c.txt"}),
		client.Call("w", "write_file", map[string]any{"path": "a.txt", "content": "written\n"}),
		client.Call("r4", "read_file", map[string]any{"path": "a.txt"}),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"P(3)", "S(1)", "P(1)"}, lanes(b.Accepted)); diff != "" {
		t.Errorf("lanes (-want +got):\n%s", diff)
	}
	var got []string
	for _, r := range b.Results {
		got = append(got, client.Text(r))
	}
	want := []string{"     1\ta\n", "     1\tb\n", "     1\tc\n", "Replaced a.txt (8 bytes).", "     1\twritten\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if d := b.Results[4].GetDetails(); d != `{"path":"a.txt","size":8,"first_line":1,"lines":1,"truncated":false}` {
		t.Errorf("read_file details %s", d)
	}
}

// TestBatchErrorsAndStreaming checks over the wire that an escape is an
// error result, that run_command streams its output as progress, and that
// its non-zero exit is a tool error.
func TestBatchErrorsAndStreaming(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	c := serve(t, e, workspacetools.Options{RunCommand: true})
	var output strings.Builder
	var results []*toolwirev1.CallResult
	for ev, err := range c.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("escape", "read_file", map[string]any{"path": "../x"}),
		client.Call("run", "run_command", map[string]any{"argv": []string{"sh", "-c", "echo one; echo two; exit 4"}}),
	}}) {
		if err != nil {
			t.Fatal(err)
		}
		if p := ev.GetProgress(); p != nil && p.GetCallId() == "run" {
			output.WriteString(p.GetOutput())
		}
		if r := ev.GetResult(); r != nil {
			results = append(results, r)
		}
	}
	if output.String() != "one\ntwo\n" {
		t.Errorf("streamed output %q", output.String())
	}
	for _, r := range results {
		if !r.GetIsError() || r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR {
			t.Errorf("%s: %v; want a TOOL_ERROR result", r.GetCallId(), r)
		}
		want := map[string]string{"escape": "path escapes the workspace: ../x", "run": "exit code 4\none\ntwo\n"}[r.GetCallId()]
		if client.Text(r) != want {
			t.Errorf("%s: %q; want %q", r.GetCallId(), client.Text(r), want)
		}
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	names := func(ts []tools.Tool) []string {
		var n []string
		for _, t := range ts {
			n = append(n, t.Name)
		}
		return n
	}
	files := []string{"edit_file", "find_files", "list_files", "read_file", "write_file"}
	if diff := cmp.Diff(files, names(workspacetools.Tools(e.WS, workspacetools.Options{}))); diff != "" {
		t.Errorf("default tools (-want +got):\n%s", diff)
	}
	all := workspacetools.Tools(e.WS, workspacetools.Options{RunCommand: true})
	want := []string{"edit_file", "find_files", "list_files", "read_file", "run_command", "write_file"}
	if diff := cmp.Diff(want, names(all)); diff != "" {
		t.Errorf("with run_command (-want +got):\n%s", diff)
	}
	for _, tool := range all {
		a := tool.Annotations
		readOnly := tool.Name == "read_file" || tool.Name == "list_files" || tool.Name == "find_files"
		if a.ReadOnly != readOnly || a.Destructive == readOnly || a.OpenWorld != (tool.Name == "run_command") {
			t.Errorf("%s: annotations %+v", tool.Name, a)
		}
	}
	if _, err := tools.NewRegistry(all...); err != nil {
		t.Errorf("the tools do not register: %v", err)
	}
}

// TestBatchSessions serves a folder per session and drives it through
// ExecuteBatch: each session's files, commands and listings are its own,
// no path reaches another session's folder, and a batch without a session
// gets an INVALID_ARGUMENTS result for each workspace call.
func TestBatchSessions(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := workspace.OpenSessions(root, workspace.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := serveResolver(t, s, workspacetools.Options{RunCommand: true})
	batch := func(session string, calls ...*toolwirev1.ToolCall) []string {
		t.Helper()
		b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{SessionId: session, Calls: calls}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range b.Results {
			got = append(got, fmt.Sprintf("%s %s", r.GetErrorKind(), client.Text(r)))
		}
		return got
	}
	alice := filepath.Join(root, s.FolderName("", "alice"))

	got := batch("alice",
		client.Call("w", "write_file", map[string]any{"path": "notes.txt", "content": "alice's notes\n"}),
		client.Call("pwd", "run_command", map[string]any{"argv": []string{"pwd"}}),
	)
	want := []string{
		"ERROR_KIND_UNSPECIFIED Created notes.txt (14 bytes).",
		"ERROR_KIND_UNSPECIFIED exit code 0\n" + alice + "\n",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alice (-want +got):\n%s", diff)
	}

	escapes := "ERROR_KIND_TOOL_ERROR path escapes the workspace: "
	sibling := "../" + filepath.Base(alice) + "/notes.txt"
	got = batch("bob",
		client.Call("own", "read_file", map[string]any{"path": "notes.txt"}),
		client.Call("rel", "read_file", map[string]any{"path": sibling}),
		client.Call("abs", "read_file", map[string]any{"path": alice + "/notes.txt"}),
		client.Call("id", "read_file", map[string]any{"path": "../alice/notes.txt"}),
		client.Call("find", "find_files", map[string]any{"pattern": "../**"}),
		client.Call("cwd", "run_command", map[string]any{"argv": []string{"cat", "notes.txt"}, "cwd": ".."}),
		client.Call("ls", "list_files", map[string]any{"path": ".", "depth": 5}),
	)
	want = []string{
		"ERROR_KIND_TOOL_ERROR no such file or folder: notes.txt",
		escapes + sibling,
		escapes + alice + "/notes.txt",
		escapes + "../alice/notes.txt",
		"ERROR_KIND_TOOL_ERROR path escapes the workspace: pattern \"../**\" must be relative to the workspace, without ..",
		escapes + "..",
		"ERROR_KIND_UNSPECIFIED (empty folder)\n",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bob (-want +got):\n%s", diff)
	}

	required := "ERROR_KIND_INVALID_ARGUMENTS " + workspace.ErrNoSession.Error()
	got = batch("",
		client.Call("r", "read_file", map[string]any{"path": "notes.txt"}),
		client.Call("w", "write_file", map[string]any{"path": "x.txt", "content": "x"}),
		client.Call("run", "run_command", map[string]any{"argv": []string{"touch", "ran"}}),
	)
	if diff := cmp.Diff([]string{required, required, required}, got); diff != "" {
		t.Errorf("no session (-want +got):\n%s", diff)
	}
	entries, _ := filepath.Glob(filepath.Join(root, "[0-9a-f]*"))
	if len(entries) != 2 {
		t.Errorf("the root holds %q; want the two sessions' folders (beside the key and the record of last uses)", entries)
	}
}
