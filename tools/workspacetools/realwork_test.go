package workspacetools_test

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestEscapeKeepsRealWork runs what a coding agent really does under the
// required sandbox, in each profile this machine offers: every restriction
// that closes an escape must leave these working. npm installs a local
// package with a bin (which needs chmod +x), git commits, tar keeps modes,
// python makes a venv, a C program compiles and runs, and a Unix socket in
// the workspace connects. (Named TestEscape… so that .ci/run runs it as
// nobody too.)
func TestEscapeKeepsRealWork(t *testing.T) {
	for _, p := range []string{"npm", "node", "git", "tar", "gcc", "python3"} {
		testenv.LookPath(t, p)
	}
	// The package npm installs, packed outside the sandbox.
	pkg := t.TempDir()
	write := func(dir, name, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(pkg, "package.json", `{"name":"hello-bin","version":"1.0.0","bin":{"hello-bin":"cli.js"}}`, 0o644)
	write(pkg, "cli.js", "#!/usr/bin/env node\nconsole.log('hello from the bin')\n", 0o644)
	pack := exec.Command("npm", "pack", "--silent", "--pack-destination", pkg)
	pack.Dir = pkg
	pack.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(t.TempDir(), "npm-cache"))
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	tarball, err := os.ReadFile(filepath.Join(pkg, "hello-bin-1.0.0.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	archive := modesArchive(t)

	for name, cfg := range profiles("300100-300199") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sb, s, root, c := serveSessions(t, cfg)
			// The inputs arrive as the model would send them: write_file.
			b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{SessionId: "dev", Calls: []*toolwirev1.ToolCall{
				client.Call("w1", "write_file", map[string]any{"path": "probe.py", "content": probePy}),
				client.Call("w2", "write_file", map[string]any{"path": "m.c", "content": "#include <stdio.h>\nint main(void) { puts(\"compiled and ran\"); return 0; }\n"}),
			}}))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range b.Results {
				if r.GetIsError() {
					t.Fatalf("write_file: %s", client.Text(r))
				}
			}
			folder := filepath.Join(root, s.FolderName("", "dev"))
			for name, data := range map[string][]byte{"hello-bin-1.0.0.tgz": tarball, "modes.tar": archive} {
				if err := os.WriteFile(filepath.Join(folder, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
				if sb.UIDs() != nil { // as write_file would have made it
					var st syscall.Stat_t
					if err := syscall.Stat(folder, &st); err != nil {
						t.Fatal(err)
					}
					if err := os.Chown(filepath.Join(folder, name), int(st.Uid), int(st.Gid)); err != nil {
						t.Fatal(err)
					}
				}
			}
			env := "HOME=$TMPDIR npm_config_cache=$TMPDIR/npm-cache npm_config_update_notifier=false "
			for _, w := range []struct{ name, command, want string }{
				{"npm installs a package with a bin", env + "npm install --offline --no-audit --no-fund ./hello-bin-1.0.0.tgz >/dev/null && ./node_modules/.bin/hello-bin", "hello from the bin"},
				{"git commits", "git init -q repo && cd repo && echo x > f && git add f && git -c user.email=a@b -c user.name=agent commit -qm first && git log --format=%s", "first"},
				{"tar keeps modes", "mkdir t && tar -xpf modes.tar --no-same-owner -C t && stat -c '%n %a' t/run.sh t/secret", "t/run.sh 755\nt/secret 600"},
				{"python makes a venv", "python3 -m venv --without-pip venv && venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)'", "True"},
				{"C compiles and runs", "gcc -o m m.c && ./m", "compiled and ran"},
				{"chmod +x in the workspace", "printf '#!/bin/sh\\necho ran it\\n' > s.sh && chmod +x s.sh && ./s.sh", "ran it"},
				{"a Unix socket in the workspace", "python3 probe.py unix-here", "unix socket in the workspace works"},
				{"flock in the workspace", "touch l && flock l true && echo locked", "locked"},
			} {
				t.Run(w.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
					defer cancel()
					b, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{SessionId: "dev", Calls: []*toolwirev1.ToolCall{
						client.Call("c", "run_command", map[string]any{"command": w.command}),
					}}))
					if err != nil {
						t.Fatal(err)
					}
					r := b.Results[0]
					if text := client.Text(r); r.GetIsError() || !strings.Contains(text, w.want) {
						t.Errorf("%s:\n%s\nwant success and %q", w.command, text, w.want)
					}
				})
			}
		})
	}
}

// modesArchive is a tar of run.sh (0755) and secret (0600).
func modesArchive(t *testing.T) []byte {
	t.Helper()
	var b strings.Builder
	w := tar.NewWriter(&b)
	for _, f := range []struct {
		name string
		mode int64
	}{{"run.sh", 0o755}, {"secret", 0o600}} {
		body := "#!/bin/sh\n"
		if err := w.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(body)), ModTime: time.Unix(1e9, 0), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}
