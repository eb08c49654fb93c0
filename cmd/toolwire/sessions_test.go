package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools/workspace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// writeInSession runs one write_file batch of session through c and fails
// the test unless it succeeds.
func writeInSession(t *testing.T, c *client.Client, session, path string) {
	t.Helper()
	b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{
		SessionId: session,
		Calls:     []*toolwirev1.ToolCall{client.Call("w", "write_file", map[string]any{"path": path, "content": session})},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Results[0]; r.GetIsError() {
		t.Fatalf("write_file %s in %s: %s", path, session, client.Text(r))
	}
}

// TestSessionAffinityReplicas runs three real "toolwire serve
// --workspace-per-session" processes, each with its own workspace root, behind
// one resolver listing all three (as DNS does for a headless Service), and a
// client WithSessionAffinity. Which replica served a call shows on disk: the
// session's folder, and the file the call wrote, appear under that
// replica's root only.
func TestSessionAffinityReplicas(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	var roots []string
	var addrs []resolver.Address
	for range 3 {
		root := t.TempDir()
		c := startChild(t, exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--workspace", root, "--workspace-per-session"))
		roots = append(roots, root)
		addrs = append(addrs, resolver.Address{Addr: c.addr})
	}
	r := manual.NewBuilderWithScheme("replicas")
	r.InitialState(resolver.State{Addresses: addrs})
	c, err := client.New(r.Scheme()+":///toolwire", client.WithSessionAffinity(), client.WithDialOptions(grpc.WithResolvers(r)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// replicasOf returns the replicas holding session's folder, and how many
	// files the folder holds on each.
	replicasOf := func(session string) map[int]int {
		found := map[int]int{}
		for i, root := range roots {
			key, _ := os.ReadFile(filepath.Join(root, ".toolwire-key")) // each replica's own, made at its start
			entries, err := os.ReadDir(filepath.Join(root, workspace.FolderName(key, "", session)))
			if err == nil {
				found[i] = len(entries)
			}
		}
		return found
	}

	for i := range 100 {
		writeInSession(t, c, "the-session", fmt.Sprintf("call-%03d.txt", i))
	}
	if got := replicasOf("the-session"); len(got) != 1 || got[firstKey(got)] != 100 {
		t.Errorf("100 calls of one session left files %v (replica → files); want all 100 on one replica", got)
	}

	used := map[int]bool{}
	for s := range 30 {
		session := fmt.Sprintf("session-%d", s)
		writeInSession(t, c, session, "f.txt")
		got := replicasOf(session)
		if len(got) != 1 {
			t.Fatalf("%s's folder is on replicas %v; want exactly one", session, got)
		}
		used[firstKey(got)] = true
	}
	if len(used) != 3 {
		t.Errorf("30 sessions used replicas %v; want all three", used)
	}
}

func firstKey(m map[int]int) int {
	for k := range m {
		return k
	}
	return -1
}

// TestServeSessionTTL checks that serve sweeps an idle session's folder
// after --session-ttl.
func TestServeSessionTTL(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s := startServe(t, "--no-workspace=false", "--workspace", root, "--workspace-per-session", "--session-ttl", "200ms")
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	writeInSession(t, c, "brief", "f.txt")
	key, err := os.ReadFile(filepath.Join(root, ".toolwire-key"))
	if err != nil {
		t.Fatalf("the folder names' key, made at start: %v", err)
	}
	folder := filepath.Join(root, workspace.FolderName(key, "", "brief"))
	if _, err := os.Stat(filepath.Join(folder, "f.txt")); err != nil {
		t.Fatalf("the session's file: %v", err)
	}
	waitFor(t, "the idle session's folder to be swept", func() bool {
		_, err := os.Stat(folder)
		return os.IsNotExist(err)
	})
}
