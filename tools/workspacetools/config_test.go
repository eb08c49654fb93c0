package workspacetools_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  workspacetools.Config
		want string // "" means valid
	}{
		{"zero value: the current directory", workspacetools.Config{}, ""},
		{"run_command", workspacetools.Config{Workspace: "/srv", RunCommand: workspacetools.RunCommandConfig{Enabled: true}}, ""},
		{"per session", workspacetools.Config{Workspace: "/srv", PerSession: true}, ""},
		{"no workspace", workspacetools.Config{NoWorkspace: true}, ""},
		{"run_command without the workspace", workspacetools.Config{NoWorkspace: true, RunCommand: workspacetools.RunCommandConfig{Enabled: true}},
			"run_command needs the workspace; drop --no-workspace or --run-command"},
		{"per session without the workspace", workspacetools.Config{NoWorkspace: true, PerSession: true},
			"--workspace-per-session needs the workspace; drop --no-workspace or --workspace-per-session"},
		{"per session in the current directory", workspacetools.Config{PerSession: true},
			"--workspace-per-session needs --workspace: the folder that holds the sessions' folders"},
		// The sandbox's settings are checked without run_command too.
		{"sandbox mode misspelt", workspacetools.Config{Sandbox: sandbox.Config{Mode: "requierd"}},
			`sandbox.mode "requierd": want auto, required or off`},
		{"sandbox network misspelt, no workspace", workspacetools.Config{NoWorkspace: true, Sandbox: sandbox.Config{Network: "alow"}},
			`sandbox.network "alow": want deny or allow`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestConfigFlags(t *testing.T) {
	t.Parallel()
	var cfg workspacetools.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Flags(fs)
	err := fs.Parse([]string{"--workspace", "/srv", "--workspace-per-session", "--run-command", "--run-command-shell",
		"--run-command-env", "HOME, LANG", "--sandbox", "required", "--sandbox-network", "allow"})
	if err != nil {
		t.Fatal(err)
	}
	want := workspacetools.Config{Workspace: "/srv", PerSession: true,
		RunCommand: workspacetools.RunCommandConfig{Enabled: true, Shell: true, Env: []string{"HOME", "LANG"}},
		Sandbox:    sandbox.Config{Mode: sandbox.Required, Network: sandbox.NetworkAllow}}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	for _, args := range [][]string{{"--sandbox", "maybe"}, {"--sandbox-network", "some"}, {"--run-command-env", "A=B"}} {
		if err := fs.Parse(args); err == nil || !strings.Contains(err.Error(), args[0][2:]) {
			t.Errorf("%q: %v, want an error about the flag", args, err)
		}
	}
}
