package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/tools/diag"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// TestConfigTableDocumented checks that the configuration page,
// docs/configuration.md, names every key of the config file (those of its
// sections too, such as sandbox.mode) and every flag of serve (in its
// table, or for --config the line above it), so a new setting cannot ship
// undocumented. TestConfigFlagsHaveKeysAndRows pairs each flag with its key.
func TestConfigTableDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	keys := configKeys(t) // with the keys of sections, such as sandbox.mode
	for _, k := range keys {
		if !strings.Contains(section, "`"+k) {
			t.Errorf("config key %q is not in docs/configuration.md's table", k)
		}
	}
	var cfg serveConfig
	var path string
	serveFlags(&cfg, &path).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(section, "`--"+f.Name+"`") {
			t.Errorf("flag --%s is not in docs/configuration.md's table", f.Name)
		}
	})
}

// TestCLISynopsisDocumented checks that docs/cli.md's synopsis of each client
// command names every flag the command takes (its -h lists them), apart from
// the TLS and token flags every client command shares, which docs/auth.md
// names instead.
func TestCLISynopsisDocumented(t *testing.T) {
	t.Parallel()
	readme := readDoc(t, "../../docs/cli.md")
	frontDoor := readDoc(t, "../../README.md")
	auth := readDoc(t, "../../docs/auth.md")
	shared := []string{"tls", "ca", "cert", "key", "token", "token-env"}
	names := func(text, flag string) bool {
		return regexp.MustCompile(`--` + regexp.QuoteMeta(flag) + `([^\w-]|$)`).MatchString(text)
	}
	for _, name := range shared {
		if !names(auth, name) {
			t.Errorf("flag --%s of the client commands is not in docs/auth.md", name)
		}
	}
	flagLine := regexp.MustCompile(`(?m)^\s+-([a-z][a-z-]*)`)
	for _, cmd := range []string{"tools", "call", "batch", "attach", "approve", "cancel"} {
		var help bytes.Buffer
		if err := run(context.Background(), []string{cmd, "-h"}, &help, &help); err != nil {
			t.Fatalf("%s -h: %v", cmd, err)
		}
		synopsis := regexp.MustCompile(`(?m)^toolwire ` + cmd + ` .*$`).FindString(readme)
		if synopsis == "" {
			t.Errorf("docs/cli.md has no synopsis line for toolwire %s", cmd)
			continue
		}
		// The README's synopsis, the front door's, is the same line.
		if front := regexp.MustCompile(`(?m)^toolwire ` + cmd + ` .*$`).FindString(frontDoor); front != "" && front != synopsis {
			t.Errorf("README.md's synopsis of toolwire %s is %q; docs/cli.md's is %q", cmd, front, synopsis)
		}
		flags := flagLine.FindAllStringSubmatch(help.String(), -1)
		if len(flags) == 0 {
			t.Fatalf("%s -h lists no flags:\n%s", cmd, help.String())
		}
		for _, m := range flags {
			if !slices.Contains(shared, m[1]) && !names(synopsis, m[1]) {
				t.Errorf("flag --%s of toolwire %s is not in docs/cli.md's synopsis %q", m[1], cmd, synopsis)
			}
		}
	}
}

// TestDocsPermissionsExample loads the permissions example of docs/auth.md:
// serve's strict parser takes it, every pattern matches a tool toolwire
// ships (no made-up names), and it decides as its comments say.
func TestDocsPermissionsExample(t *testing.T) {
	t.Parallel()
	block := yamlBlock(t, readDoc(t, "../../docs/auth.md"), "\n  permissions:\n")
	var cfg serveConfig
	if err := readConfigFile(writeFile(t, "toolwire.yaml", block), &cfg); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	var names []string
	for _, tool := range append(workspacetools.Tools(ws, workspacetools.Options{RunCommand: true}), diag.Tools()...) {
		names = append(names, tool.Name)
	}
	policy := cfg.Auth.Permissions
	for caller, rule := range policy {
		for _, pat := range append(slices.Clone(rule.Allow), rule.Deny...) {
			if !slices.ContainsFunc(names, func(n string) bool { ok, _ := path.Match(pat, n); return ok }) {
				t.Errorf("%s's pattern %q matches none of the built-in tools %q", caller, pat, names)
			}
		}
	}
	for _, c := range []struct {
		caller, tool string
		want         bool
	}{
		{"ci-agent", "read_file", true},
		{"ci-agent", "list_files", true},
		{"ci-agent", "find_files", true},
		{"ci-agent", "write_file", false},
		{"ci-agent", "run_command", false},
		{"support-bot", "read_file", true},
		{"support-bot", "echo", true},
		{"support-bot", "edit_file", false},
		{"support-bot", "run_command", false},
		{"someone-else", "read_file", false},
	} {
		if got := policy.Permitted(c.caller, c.tool); got != c.want {
			t.Errorf("Permitted(%q, %q) = %v, want %v", c.caller, c.tool, got, c.want)
		}
	}
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// yamlBlock returns the first ```yaml block of page that contains marker.
func yamlBlock(t *testing.T, page, marker string) string {
	t.Helper()
	for _, part := range strings.Split(page, "```yaml\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if ok && strings.Contains(block, marker) {
			return block
		}
	}
	t.Fatalf("no yaml block with %q", marker)
	return ""
}
