package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

func TestParseWorkspaceArgs(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", "workspace: /srv/repo\nrun_command:\n  enabled: true\n  shell: true\n  env: [HOME, GOPATH]\n")
	tests := []struct {
		name string
		args []string
		want WorkspaceConfig
	}{
		{"defaults", nil, WorkspaceConfig{}},
		{"flags", []string{"--workspace", "w", "--run-command", "--run-command-env", "HOME, LANG,"},
			WorkspaceConfig{Workspace: "w", RunCommand: workspacetools.RunCommandConfig{Enabled: true, Env: []string{"HOME", "LANG"}}}},
		{"no workspace", []string{"--no-workspace"}, WorkspaceConfig{NoWorkspace: true}},
		{"per session", []string{"--workspace-per-session"}, WorkspaceConfig{PerSession: true}},
		{"per session in the file", []string{"--config", writeFile(t, "ps.yaml", "workspace_per_session: true\n")}, WorkspaceConfig{PerSession: true}},
		{"file", []string{"--config", path},
			WorkspaceConfig{Workspace: "/srv/repo", RunCommand: workspacetools.RunCommandConfig{Enabled: true, Shell: true, Env: []string{"HOME", "GOPATH"}}}},
		{"flags override the file", []string{"--config", path, "--run-command-shell=false", "--run-command-env", "PATH"},
			WorkspaceConfig{Workspace: "/srv/repo", RunCommand: workspacetools.RunCommandConfig{Enabled: true, Env: []string{"PATH"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, help, err := parseServeArgs(tt.args, io.Discard)
			if err != nil || help {
				t.Fatalf("parseServeArgs: help %v, error %v", help, err)
			}
			if diff := cmp.Diff(tt.want, got.WorkspaceConfig); diff != "" {
				t.Errorf("workspace config (-want +got):\n%s", diff)
			}
		})
	}
	if _, _, err := parseServeArgs([]string{"--run-command-env", "A=B"}, io.Discard); err == nil {
		t.Error("--run-command-env A=B: no error")
	}
	if _, _, err := parseServeArgs([]string{"--config", writeFile(t, "bad.yaml", "run_command:\n  enable: true\n")}, io.Discard); err == nil || !strings.Contains(err.Error(), "enable") {
		t.Errorf("misspelt run_command key: %v", err)
	}
}

// TestServeWorkspace serves the workspace tools with run_command and drives
// them with the CLI.
func TestServeWorkspace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--no-workspace=false", "--workspace", dir, "--run-command")

	got := runCmd(t, s.addr, "tools")
	for _, name := range []string{"edit_file", "find_files", "list_files", "read_file", "run_command", "write_file"} {
		if !strings.Contains(got.stdout, name) {
			t.Errorf("tools does not list %s:\n%s", name, got.stdout)
		}
	}
	if got = runCmd(t, s.addr, "call", "read_file", `{"path":"notes.txt"}`); got.code != 0 || got.stdout != "     1\thello\n" {
		t.Errorf("read_file: exit %d, stdout %q", got.code, got.stdout)
	}
	if got = runCmd(t, s.addr, "call", "run_command", `{"argv":["cat","notes.txt"]}`); got.code != 0 || !strings.Contains(got.stdout, "exit code 0\nhello\n") {
		t.Errorf("run_command: exit %d, stdout %q", got.code, got.stdout)
	}
	if got = runCmd(t, s.addr, "call", "read_file", `{"path":"../x"}`); got.code != 1 || !strings.Contains(got.stdout, "path escapes the workspace") {
		t.Errorf("escape: exit %d, stdout %q", got.code, got.stdout)
	}
}

// TestServeWorkspaceByDefault checks that a plain serve offers the file
// tools, not run_command.
func TestServeWorkspaceByDefault(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--no-workspace=false", "--workspace", t.TempDir())
	got := runCmd(t, s.addr, "tools")
	if !strings.Contains(got.stdout, "read_file") || strings.Contains(got.stdout, "run_command") {
		t.Errorf("tools:\n%s", got.stdout)
	}
}

func TestServeWorkspaceErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"run_command without workspace", []string{"--no-workspace", "--run-command"}, 2, "run_command needs the workspace"},
		{"per session without workspace", []string{"--no-workspace", "--workspace-per-session"}, 2, "--workspace-per-session needs the workspace"},
		{"per session without a folder", []string{"--workspace-per-session"}, 2, "--workspace-per-session needs --workspace"},
		{"per session in a missing folder", []string{"--workspace-per-session", "--workspace", filepath.Join(t.TempDir(), "missing")}, 1, "--no-workspace to serve none"},
		{"missing folder", []string{"--workspace", filepath.Join(t.TempDir(), "missing")}, 1, "--no-workspace to serve none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			err := run(context.Background(), append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...), io.Discard, &stderr)
			if exitCode(err) != tt.code || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("serve %q: %v (exit %d); want exit %d and %q", tt.args, err, exitCode(err), tt.code, tt.want)
			}
		})
	}
}
