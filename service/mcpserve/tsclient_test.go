package mcpserve

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// tsclient is the folder of the Node.js clients (npm ci there; .ci/run
// does).
const tsclient = "testdata/tsclient"

// nodeBin returns node and the path of an installed package's program,
// or reports them Missing.
func nodeBin(t *testing.T, bin string) string {
	t.Helper()
	testenv.LookPath(t, "node")
	path, err := filepath.Abs(filepath.Join(tsclient, "node_modules", ".bin", bin))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		testenv.Missing(t, "the Node.js clients of mcpserve (npm ci in service/mcpserve/testdata/tsclient)")
	}
	return path
}

// TestTypeScriptClients runs client.mjs: the official TypeScript SDK's v1
// client (2025-11-25, sessions) and v2 client (pinned to 2026-07-28) list,
// call, get images, errors and structured content, replay, follow
// progress, abort a call (which the tool sees), and hear of a tool added
// mid-session; a wrong token is refused.
func TestTypeScriptClients(t *testing.T) {
	t.Parallel()
	nodeBin(t, "mcp-inspector") // the packages are installed
	ts := newTestServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs", ts.url, "alice-token")
	cmd.Dir = tsclient
	out, err := cmd.CombinedOutput()
	t.Logf("node client.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node client.mjs: %v", err)
	}
	var held []string
	for len(held) < 2 {
		select {
		case id := <-ts.cancelled:
			held = append(held, id)
		case <-time.After(5 * time.Second):
			t.Fatalf("the tool saw %q cancelled; want both clients' holds", held)
		}
	}
	slices.Sort(held)
	if !slices.Equal(held, []string{"held-v1", "held-v2"}) {
		t.Errorf("cancelled %q, want held-v1 and held-v2", held)
	}
}

// TestInspectorCLI runs the MCP Inspector's CLI mode, as a person would
// (npx @modelcontextprotocol/inspector --cli URL --method tools/list):
// it lists the caller's tools and calls one, and without a token it gets
// nothing.
func TestInspectorCLI(t *testing.T) {
	t.Parallel()
	inspector := nodeBin(t, "mcp-inspector")
	ts := newTestServer(t, nil)
	home := t.TempDir() // its catalog goes to ~/.mcp-inspector
	run := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, inspector, append([]string{"--cli", ts.url}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		cmd.Stderr = &strings.Builder{}
		out, err := cmd.Output()
		if err != nil {
			t.Logf("inspector %q: %v\n%s", args, err, cmd.Stderr)
		}
		return out, err
	}
	bearer := []string{"--header", "Authorization: Bearer bob-token"}
	out, err := run(append([]string{"--method", "tools/list"}, bearer...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("inspector --method tools/list:\n%s", out)
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			Annotations map[string]any `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("tools/list output: %v", err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	want := slices.DeleteFunc(slices.Clone(ts.reg.Snapshot().Names()), func(n string) bool { return n == "secret" })
	if !slices.Equal(names, want) {
		t.Errorf("bob's tools through the Inspector: %v, want %v", names, want)
	}

	out, err = run(append([]string{"--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=inspected"}, bearer...)...)
	if err != nil || !strings.Contains(string(out), `"text": "inspected"`) {
		t.Errorf("tools/call echo: %v\n%s", err, out)
	}
	if out, err := run("--method", "tools/list"); err == nil {
		t.Errorf("without a token: listed\n%s", out)
	}
}
