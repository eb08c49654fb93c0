package workspacetools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace/usage"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// openServed opens the workspace tools cfg configures, as serve does, and
// serves them over a real loopback listener; a call returns its result.
func openServed(t *testing.T, cfg workspacetools.Config) func(session, name string, args map[string]any) *toolwirev1.CallResult {
	t.Helper()
	set, err := workspacetools.Open(cfg, workspacetools.Env{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	reg, err := tools.NewRegistry(set.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	c := loopback.Serve(t, reg, grpcserve.Config{}).Client
	return func(session, name string, args map[string]any) *toolwirev1.CallResult {
		t.Helper()
		b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{SessionId: session,
			Calls: []*toolwirev1.ToolCall{client.Call("c", name, args)}}))
		if err != nil {
			t.Fatal(err)
		}
		return b.Results[0]
	}
}

// sessionFolders lists the session folders under root.
func sessionFolders(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && len(e.Name()) == 32 {
			dirs = append(dirs, filepath.Join(root, e.Name()))
		}
	}
	return dirs
}

// TestSessionWorkspaceBound writes 64 KiB files through write_file, ten
// times, into one session whose folder may hold 256 KiB
// (sandbox.max_workspace_bytes): the writes past the bound are refused with
// a message saying what the folder holds and what to do, and the folder
// holds no more than the bound. Another session has its own bound; a
// write that shrinks a file, and a growing edit_file's refusal, follow the
// same rule; after a command removes files, writes have room again. A
// shared workspace is bounded alike.
func TestSessionWorkspaceBound(t *testing.T) {
	t.Parallel()
	const bound = 256 << 10
	root := t.TempDir()
	call := openServed(t, workspacetools.Config{Workspace: root, PerSession: true, MinFreeBytes: -1,
		RunCommand: workspacetools.RunCommandConfig{Enabled: true},
		Sandbox:    sandbox.Config{Mode: sandbox.Off, MaxWorkspaceBytes: bound}})
	chunk := strings.Repeat("x", 64<<10)
	written, refused := 0, ""
	for i := range 10 {
		r := call("s1", "write_file", map[string]any{"path": filepath.Join("d", string(rune('a'+i))+".txt"), "content": chunk})
		if !r.GetIsError() {
			written++
			continue
		}
		refused = client.Text(r)
	}
	dirs := sessionFolders(t, root)
	if len(dirs) != 1 {
		t.Fatalf("session folders %v; want one", dirs)
	}
	held := usage.Measure(dirs, 0, 0).Bytes
	t.Logf("%d of 10 writes of 64 KiB made; the folder holds %d bytes; refused: %s", written, held, refused)
	if held > bound || written == 10 {
		t.Errorf("the session's folder holds %d bytes after %d writes of 64 KiB; want at most sandbox.max_workspace_bytes, %d", held, written, bound)
	}
	if !strings.Contains(refused, "cannot write d/") || !strings.Contains(refused, "past its limit, sandbox.max_workspace_bytes: 256.0 KiB (262144 bytes)") || !strings.Contains(refused, "remove or shrink files") {
		t.Errorf("refusal %q; want the path, the limit and what to do", refused)
	}

	if r := call("s2", "write_file", map[string]any{"path": "a.txt", "content": chunk}); r.GetIsError() {
		t.Errorf("another session's first write: %s; want it made (a bound of its own)", client.Text(r))
	}
	if r := call("s1", "edit_file", map[string]any{"path": "d/a.txt", "old_text": "x", "new_text": "xy", "replace_all": true}); !r.GetIsError() || !strings.Contains(client.Text(r), "past its limit") {
		t.Errorf("an edit doubling a file of the full session: %s; want it refused", client.Text(r))
	}
	if r := call("s1", "run_command", map[string]any{"argv": []string{"rm", "d/b.txt", "d/c.txt"}}); r.GetIsError() {
		t.Fatalf("rm: %s", client.Text(r))
	}
	for _, p := range []string{"d/z.txt", "d/y.txt"} {
		if r := call("s1", "write_file", map[string]any{"path": p, "content": chunk}); r.GetIsError() {
			t.Errorf("a write after a command removed 128 KiB: %s; want it made (the folder measured again)", client.Text(r))
		}
	}
	if r := call("s1", "write_file", map[string]any{"path": "d/x.txt", "content": chunk}); !r.GetIsError() {
		t.Errorf("a write past the bound again: %s; want it refused", client.Text(r))
	}
	if r := call("s1", "write_file", map[string]any{"path": "d/a.txt", "content": "short"}); r.GetIsError() {
		t.Errorf("a write shrinking a file of the full session: %s; want it made", client.Text(r))
	}

	// The shared workspace is held to the same bound: on Kubernetes it is
	// an emptyDir whose sizeLimit, passed, evicts the pod.
	shared := t.TempDir()
	callShared := openServed(t, workspacetools.Config{Workspace: shared, MinFreeBytes: -1, Sandbox: sandbox.Config{MaxWorkspaceBytes: bound}})
	written = 0
	for i := range 6 {
		if r := callShared("", "write_file", map[string]any{"path": string(rune('a'+i)) + ".txt", "content": chunk}); !r.GetIsError() {
			written++
		} else if !strings.Contains(client.Text(r), "past its limit") {
			t.Errorf("shared workspace, write %d: %s; want it made or refused for the bound", i, client.Text(r))
		}
	}
	if held := usage.Measure([]string{shared}, 0, 0).Bytes; held > bound || written == 6 {
		t.Errorf("the shared workspace holds %d bytes after %d writes of 64 KiB; want at most sandbox.max_workspace_bytes, %d", held, written, bound)
	}
}

// TestMinFree sets workspace_min_free_bytes to 1 GiB more than the
// workspace's disk has free, as statfs tells: write_file and run_command
// are refused, saying why, and write nothing; with the reserve off
// (-1) the same write is made.
func TestMinFree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	free, err := usage.Free(dir)
	if err != nil {
		t.Fatal(err)
	}
	call := openServed(t, workspacetools.Config{Workspace: dir, MinFreeBytes: int64(free + 1<<30),
		RunCommand: workspacetools.RunCommandConfig{Enabled: true}, Sandbox: sandbox.Config{Mode: sandbox.Off}})
	r := call("", "write_file", map[string]any{"path": "a.txt", "content": "a"})
	if !r.GetIsError() || !strings.Contains(client.Text(r), "workspace_min_free_bytes") {
		t.Errorf("write_file below the reserve: %s; want it refused naming workspace_min_free_bytes", client.Text(r))
	}
	if _, err := os.Lstat(filepath.Join(dir, "a.txt")); err == nil {
		t.Error("the refused write made a.txt")
	}
	r = call("", "run_command", map[string]any{"argv": []string{"touch", "b.txt"}})
	if !r.GetIsError() || !strings.HasPrefix(client.Text(r), "cannot start the command: ") || !strings.Contains(client.Text(r), "workspace_min_free_bytes") {
		t.Errorf("run_command below the reserve: %s; want it refused naming workspace_min_free_bytes", client.Text(r))
	}
	if _, err := os.Lstat(filepath.Join(dir, "b.txt")); err == nil {
		t.Error("the refused command ran")
	}

	off := openServed(t, workspacetools.Config{Workspace: t.TempDir(), MinFreeBytes: -1})
	if r := off("", "write_file", map[string]any{"path": "a.txt", "content": "a"}); r.GetIsError() {
		t.Errorf("write_file with the reserve off: %s", client.Text(r))
	}
}
