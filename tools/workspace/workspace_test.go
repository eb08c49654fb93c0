package workspace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// TestEscapeCorpus reads every path of the corpus through the workspace:
// the refused ones fail with an error naming the escape, the accepted ones
// read the file inside.
func TestEscapeCorpus(t *testing.T) {
	t.Parallel()
	for _, c := range workspacetest.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			for name, p := range c.Refused {
				t.Run("refused/"+name, func(t *testing.T) {
					rel, err := c.WS.Rel(p)
					if err == nil {
						var b []byte
						b, err = c.WS.Root().ReadFile(rel)
						if err == nil {
							t.Fatalf("read %q: %q", p, b)
						}
					}
					if got := workspace.Describe(p, err); !strings.Contains(got, "path escapes the workspace") {
						t.Errorf("Describe(%q) = %q; want it to say the path escapes", p, got)
					}
				})
			}
			for name, p := range c.Accepted {
				t.Run("accepted/"+name, func(t *testing.T) {
					rel, err := c.WS.Rel(p)
					if err != nil {
						t.Fatalf("Rel(%q): %v", p, err)
					}
					b, err := c.WS.Root().ReadFile(rel)
					if err != nil || string(b) != workspacetest.Inside {
						t.Errorf("read %q (as %q): %q, %v", p, rel, b, err)
					}
				})
			}
		})
	}
}

func TestRel(t *testing.T) {
	t.Parallel()
	e := workspacetest.New(t, nil)
	tests := []struct{ in, want string }{
		{"", "."},
		{".", "."},
		{"a/b/../c", "a/c"},
		{"..notes", "..notes"},
		{e.Dir, "."},
		{e.Dir + "/x/y", "x/y"},
		{e.Dir + "/../ws/x", "x"},
	}
	for _, tt := range tests {
		got, err := e.WS.Rel(tt.in)
		if err != nil || got != filepath.FromSlash(tt.want) {
			t.Errorf("Rel(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, p := range []string{"..", "a/../..", e.Dir + "-other/x", "/", "x\x00"} {
		if got, err := e.WS.Rel(p); !errors.Is(err, workspace.ErrEscapes) {
			t.Errorf("Rel(%q) = %q, %v; want ErrEscapes", p, got, err)
		}
	}
}

// TestOpenThroughSymlink opens a workspace named by a symlink: absolute
// paths through either name are inside.
func TestOpenThroughSymlink(t *testing.T) {
	t.Parallel()
	e := workspacetest.New(t, map[string]string{"f": "x"})
	alias := filepath.Join(e.Parent, "alias")
	if err := os.Symlink(e.Dir, alias); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(alias)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, p := range []string{alias + "/f", e.Dir + "/f"} {
		if rel, err := ws.Rel(p); err != nil || rel != "f" {
			t.Errorf("Rel(%q) = %q, %v; want f", p, rel, err)
		}
	}
	if _, err := workspace.Open(filepath.Join(e.Parent, "missing")); err == nil {
		t.Error("Open of a missing folder: no error")
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	e := workspacetest.New(t, map[string]string{"file": "x"})
	_, missing := e.WS.Root().Open("nope")
	_, notDir := e.WS.Root().Open("file/x")
	tests := []struct {
		err  error
		want string
	}{
		{missing, "no such file or folder: p"},
		{notDir, "not a folder: a parent of p is a file"},
		{fs.ErrPermission, "permission denied: p"},
		{errors.New("boom"), "p: boom"},
		// The server's own shortage is not the file's: not "p: too many
		// open files", which reads as something about p.
		{&fs.PathError{Op: "openat", Path: "p", Err: syscall.EMFILE}, "cannot reach p now: the server has as many files open as it may (too many open files); try again shortly"},
		{&fs.PathError{Op: "openat", Path: "p", Err: syscall.ENFILE}, "cannot reach p now: the system has as many files open as it may (file table overflow); try again shortly"},
	}
	for _, tt := range tests {
		if got := workspace.Describe("p", tt.err); got != tt.want {
			t.Errorf("Describe(%v) = %q; want %q", tt.err, got, tt.want)
		}
	}
	// No path is the workspace itself (run_command without a cwd), not "".
	if got, want := workspace.Describe("", syscall.EMFILE), "cannot reach . now: the server has as many files open as it may (too many open files); try again shortly"; got != want {
		t.Errorf("Describe(\"\", EMFILE) = %q; want %q", got, want)
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	e := workspacetest.New(t, map[string]string{"old.txt": "old", "target.txt": "target"})
	if err := os.Chmod(filepath.Join(e.Dir, "old.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.txt", filepath.Join(e.Dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(e.Dir, "folder"), 0o755); err != nil {
		t.Fatal(err)
	}

	created, err := e.WS.WriteFile("new/deeper/file.txt", []byte("new"))
	if err != nil || !created || e.Read(t, "new/deeper/file.txt") != "new" {
		t.Errorf("new file: created %v, err %v, content %q", created, err, e.Read(t, "new/deeper/file.txt"))
	}
	created, err = e.WS.WriteFile("old.txt", []byte("replaced"))
	if err != nil || created || e.Read(t, "old.txt") != "replaced" {
		t.Errorf("old file: created %v, err %v, content %q", created, err, e.Read(t, "old.txt"))
	}
	if info, err := os.Stat(filepath.Join(e.Dir, "old.txt")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("replaced file's mode %v, %v; want 0600 kept", info.Mode(), err)
	}
	if _, err := e.WS.WriteFile("link", []byte("through")); err != nil || e.Read(t, "target.txt") != "through" {
		t.Errorf("write through a symlink: %v, target %q", err, e.Read(t, "target.txt"))
	}
	if info, err := os.Lstat(filepath.Join(e.Dir, "link")); err != nil || info.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v, %v", info.Mode(), err)
	}
	if _, err := e.WS.WriteFile("folder", []byte("x")); err == nil || !strings.Contains(workspace.Describe("folder", err), "is a folder") {
		t.Errorf("writing over a folder: %v", err)
	}
	if _, err := e.WS.WriteFile("old.txt/x", []byte("x")); err == nil {
		t.Error("writing below a file: no error")
	}

	var names []string
	_ = filepath.WalkDir(e.Dir, func(p string, d fs.DirEntry, _ error) error {
		if !d.IsDir() {
			names = append(names, strings.TrimPrefix(p, e.Dir+"/"))
		}
		return nil
	})
	want := []string{"link", "new/deeper/file.txt", "old.txt", "target.txt"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("files left (-want +got), no temporary file may remain:\n%s", diff)
	}
}

func TestIsBinary(t *testing.T) {
	t.Parallel()
	if workspace.IsBinary([]byte("text\n")) || !workspace.IsBinary([]byte("a\x00b")) {
		t.Error("IsBinary is wrong about a NUL byte")
	}
	late := append([]byte(strings.Repeat("a", 9000)), 0)
	if workspace.IsBinary(late) {
		t.Error("a NUL byte past the first 8000 bytes counts")
	}
}

// TestAbsoluteSymlinkInside documents a limit of os.Root: a symlink with an
// absolute target is refused even when the target lies inside.
func TestAbsoluteSymlinkInside(t *testing.T) {
	t.Parallel()
	e := workspacetest.New(t, map[string]string{"f": "x"})
	if err := os.Symlink(filepath.Join(e.Dir, "f"), filepath.Join(e.Dir, "abs")); err != nil {
		t.Fatal(err)
	}
	_, err := e.WS.Root().ReadFile("abs")
	if got := workspace.Describe("abs", err); !strings.Contains(got, "path escapes the workspace") {
		t.Errorf("absolute symlink inside: %q", got)
	}
}

// TestWriteFileLeavesNoTempFile interferes with the last step of an atomic
// write: the folder is swapped for a symlink to outside the workspace just
// before the rename (as a racing command could), and the rename then fails
// or goes ahead. Either way no temporary file is left anywhere, and nothing
// outside changes.
func TestWriteFileLeavesNoTempFile(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{true, false} {
		t.Run(fmt.Sprint("rename fails: ", fail), func(t *testing.T) {
			t.Parallel()
			e := workspacetest.New(t, map[string]string{"d/x": "old"})
			outside := t.TempDir()
			workspace.SetRename(e.WS, func(dir *os.Root, oldname, newname string) error {
				if err := os.Rename(filepath.Join(e.Dir, "d"), filepath.Join(e.Dir, "moved")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(outside, filepath.Join(e.Dir, "d")); err != nil {
					t.Fatal(err)
				}
				if fail {
					return &fs.PathError{Op: "renameat", Path: oldname, Err: syscall.EIO}
				}
				return dir.Rename(oldname, newname)
			})
			_, err := e.WS.WriteFile("d/x", []byte("new"))
			want := "new" // the folder moved, and the file in it was replaced
			if fail {
				want = "old"
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("err = %v; want the rename's EIO", err)
				}
			} else if err != nil {
				t.Errorf("err = %v", err)
			}
			if got := e.Read(t, "moved/x"); got != want {
				t.Errorf("x holds %q; want %q", got, want)
			}
			var names []string
			for _, root := range []string{e.Dir, outside} {
				_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, _ error) error {
					if !d.IsDir() {
						names = append(names, strings.TrimPrefix(p, root))
					}
					return nil
				})
			}
			if diff := cmp.Diff([]string{"/d", "/moved/x"}, names); diff != "" {
				t.Errorf("files in the workspace and outside (-want +got); no temporary file may remain:\n%s", diff)
			}
		})
	}
}

// TestWriteThroughSymlinks writes through symlinks as write_file and
// edit_file do: a chain of links to a file replaces the file atomically
// (a write that fails leaves the old content, and no temporary file),
// keeping the links; a link to a named pipe, a socket or a device is
// refused at once rather than opened (opening a pipe for writing waits
// for a reader: the call would hang past its deadline), and one leading
// outside (to /dev/null) as ever; a link to nothing
// creates its file; a link whose path through a symlinked folder and ..
// the kernel resolves elsewhere than the joined path is refused, leaving
// nothing behind.
func TestWriteThroughSymlinks(t *testing.T) {
	t.Parallel()
	e := workspacetest.New(t, map[string]string{"target.txt": "old", "x/t": "x's", "x/y/keep": ""})
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(e.Dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(e.Dir, "target.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(e.Dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	link("target.txt", "one")
	link("one", "two")
	if err := syscall.Mknod(filepath.Join(e.Dir, "sock"), syscall.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	link("pipe", "topipe")
	link("sock", "tosock")
	link("/dev/null", "todev")
	link("missing.txt", "dangling")
	link("x/y", "d")
	link("d/../t", "tricky") // the kernel: x/t; joined: t

	workspace.SetRename(e.WS, func(*os.Root, string, string) error {
		return &fs.PathError{Op: "renameat", Path: "x", Err: syscall.ENOSPC}
	})
	if _, err := e.WS.WriteFile("two", []byte("new")); !errors.Is(err, syscall.ENOSPC) || e.Read(t, "target.txt") != "old" {
		t.Errorf("a failed write through two links: %v, the target holds %q; want ENOSPC and the old content", err, e.Read(t, "target.txt"))
	}
	workspace.SetRename(e.WS, nil)
	if created, err := e.WS.WriteFile("two", []byte("new")); err != nil || created || e.Read(t, "target.txt") != "new" {
		t.Errorf("write through two links: created %v, %v, the target holds %q", created, err, e.Read(t, "target.txt"))
	}
	if info, err := os.Stat(filepath.Join(e.Dir, "target.txt")); err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("the target's mode: %v, %v; want 0640 kept", info.Mode(), err)
	}
	for _, name := range []string{"one", "two"} {
		if info, err := os.Lstat(filepath.Join(e.Dir, name)); err != nil || info.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symlink: %v", name, err)
		}
	}

	for _, name := range []string{"topipe", "tosock"} {
		_, err := e.WS.WriteFile(name, []byte("x"))
		if got := workspace.Describe(name, err); !errors.Is(err, workspace.ErrNotRegular) || !strings.Contains(got, "not a regular file") {
			t.Errorf("write through %s: %q", name, got)
		}
	}
	if _, err := e.WS.WriteFile("todev", []byte("x")); !strings.Contains(workspace.Describe("todev", err), "path escapes the workspace") {
		t.Errorf("write through a link to /dev/null: %v", err)
	}

	if created, err := e.WS.WriteFile("dangling", []byte("made")); err != nil || !created || e.Read(t, "missing.txt") != "made" {
		t.Errorf("write through a link to nothing: created %v, %v", created, err)
	}

	_, err := e.WS.WriteFile("tricky", []byte("guess"))
	if !errors.Is(err, workspace.ErrEscapes) || e.Read(t, "x/t") != "x's" {
		t.Errorf("write through a link the joined path misreads: %v, x/t holds %q", err, e.Read(t, "x/t"))
	}
	if _, err := os.Lstat(filepath.Join(e.Dir, "t")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the misread path t was left: %v", err)
	}

	var names []string
	_ = filepath.WalkDir(e.Dir, func(p string, d fs.DirEntry, _ error) error {
		if strings.Contains(d.Name(), ".toolwire-") {
			names = append(names, p)
		}
		return nil
	})
	if len(names) > 0 {
		t.Errorf("temporary files left: %q", names)
	}
}

// TestWriteFileKeepsOwner replaces a file that belongs to another user, as a
// server running as root does: the new file keeps the old one's owner and
// group (a root server editing a user's checkout must not take its files),
// and its permissions without setuid and setgid.
func TestWriteFileKeepsOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	e := workspacetest.New(t, map[string]string{"theirs.sh": "old"})
	p := filepath.Join(e.Dir, "theirs.sh")
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755|fs.ModeSetuid|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WS.WriteFile("theirs.sh", []byte("new")); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	if st.Uid != 65534 || st.Gid != 65534 || info.Mode() != 0o755 {
		t.Errorf("replaced file: owner %d:%d, mode %v; want 65534:65534, -rwxr-xr-x", st.Uid, st.Gid, info.Mode())
	}
}
