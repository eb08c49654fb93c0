package workspacetools_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// TestOpen checks what Open owns: the workspace's tools (run_command with
// it enabled, none with no_workspace), the session-root check before the
// sandbox starts, and an error that names the way out when the folder
// cannot be opened.
func TestOpen(t *testing.T) {
	t.Parallel()
	names := func(s *workspacetools.Set) []string {
		var ns []string
		for _, tl := range s.Tools() {
			ns = append(ns, tl.Name)
		}
		return ns
	}
	ws, err := workspacetools.Open(workspacetools.Config{Workspace: t.TempDir(), RunCommand: workspacetools.RunCommandConfig{Enabled: true}, Sandbox: sandbox.Config{Mode: sandbox.Off}}, workspacetools.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(ws); !slices.Contains(got, "run_command") || !slices.Contains(got, "read_file") {
		t.Errorf("tools %v; want the file tools and run_command", got)
	}
	if err := ws.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	none, err := workspacetools.Open(workspacetools.Config{NoWorkspace: true}, workspacetools.Env{})
	if err != nil || len(none.Tools()) != 0 || none.Close() != nil {
		t.Errorf("no_workspace: %v, %v; want no tools and nothing to close", names(none), err)
	}

	root := t.TempDir()
	_, err = workspacetools.Open(workspacetools.Config{Workspace: filepath.Join(root, "sessions"), PerSession: true,
		RunCommand: workspacetools.RunCommandConfig{Enabled: true}, Sandbox: sandbox.Config{Mode: sandbox.Required, ReadOnlyPaths: []string{root}}}, workspacetools.Env{})
	if err == nil || !strings.Contains(err.Error(), "holds the sessions' folders") {
		t.Errorf("required sandbox with a read-only path holding the sessions: %v; want it refused", err)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = workspacetools.Open(workspacetools.Config{Workspace: file}, workspacetools.Env{})
	if err == nil || !strings.Contains(err.Error(), "--no-workspace") {
		t.Errorf("a file as the workspace: %v; want an error naming --workspace and --no-workspace", err)
	}
	_, err = workspacetools.Open(workspacetools.Config{NoWorkspace: true, RunCommand: workspacetools.RunCommandConfig{Enabled: true}}, workspacetools.Env{})
	if err == nil {
		t.Error("Open took settings Validate refuses")
	}
}
