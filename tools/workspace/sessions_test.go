package workspace_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/workspace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const ttl = time.Hour

// clock is a settable clock for SessionOptions.Now.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// openSessions serves sessions under a new temporary root, with no
// background sweep unless opts asks for one, closed when the test ends.
func openSessions(t *testing.T, opts workspace.SessionOptions) (*workspace.Sessions, string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if opts.TTL == 0 {
		opts.TTL = ttl
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = 24 * time.Hour
	}
	s, err := workspace.OpenSessions(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, root
}

func sessionCall(caller, id string) *tools.Call {
	c := tools.NewCall("c1", "read_file", nil, nil)
	c.Caller, c.SessionID = caller, id
	return c
}

func resolve(t *testing.T, s *workspace.Sessions, caller, id string) (*workspace.Workspace, func()) {
	t.Helper()
	ws, release, err := s.Resolve(sessionCall(caller, id))
	if err != nil {
		t.Fatalf("Resolve(%q, %q): %v", caller, id, err)
	}
	return ws, release
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestSessionsFolderPerSession checks that each caller's session gets its
// own folder directly under the root, named by a hash whatever the ID
// holds, and that a session's later calls get the same workspace.
func TestSessionsFolderPerSession(t *testing.T) {
	t.Parallel()
	s, root := openSessions(t, workspace.SessionOptions{})
	ids := []string{"alice", "bob", "../escape", "/etc/passwd", "a/b", ".", "..", "x\x00y", strings.Repeat("long", 1000), "ünïcode"}
	dirs := map[string]string{}
	for _, id := range ids {
		ws, release := resolve(t, s, "", id)
		defer release()
		if filepath.Dir(ws.Dir()) != root {
			t.Errorf("session %.20q: folder %s is not directly under the root %s", id, ws.Dir(), root)
		}
		name := filepath.Base(ws.Dir())
		if name != s.FolderName("", id) || len(name) != 32 || strings.Contains(name, id) {
			t.Errorf("session %.20q: folder name %q; want the 32-digit hash %s", id, name, s.FolderName("", id))
		}
		if other, ok := dirs[name]; ok {
			t.Errorf("sessions %.20q and %.20q share folder %s", id, other, name)
		}
		dirs[name] = id
		if _, err := ws.WriteFile("mine.txt", []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	again, release := resolve(t, s, "", "alice")
	defer release()
	if b, err := again.Root().ReadFile("mine.txt"); err != nil || string(b) != "alice" {
		t.Errorf("alice's second call reads %q, %v", b, err)
	}
	// Another caller's session of the same ID is another session.
	carol, release := resolve(t, s, "carol", "alice")
	defer release()
	if _, err := carol.Root().ReadFile("mine.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("caller carol's session alice sees the anonymous alice's file: %v", err)
	}
}

// TestSessionsRequired checks that a call without a session gets an
// INVALID_ARGUMENTS result saying a session is required, and nothing runs.
func TestSessionsRequired(t *testing.T) {
	t.Parallel()
	s, root := openSessions(t, workspace.SessionOptions{})
	ran := false
	h := workspace.Handler(s, func(context.Context, *tools.Call, *workspace.Workspace) (*tools.Result, error) {
		ran = true
		return tools.Text("ran"), nil
	})
	res, err := h(t.Context(), sessionCall("", ""))
	if err != nil || ran || !res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) ||
		!strings.Contains(res.Content[0].Text, "a session is required") {
		t.Errorf("result %+v, error %v, ran %v; want an INVALID_ARGUMENTS result saying a session is required", res, err, ran)
	}
	if entries := sessionFolders(root); len(entries) != 0 {
		t.Errorf("the root holds %v; want nothing", entries)
	}
}

// TestTypedRunsInTheCallsWorkspace checks that a typed workspace tool gets
// its decoded arguments and its session's folder, declares no output, and,
// without a session, gets the same INVALID_ARGUMENTS result as Handler.
func TestTypedRunsInTheCallsWorkspace(t *testing.T) {
	t.Parallel()
	s, root := openSessions(t, workspace.SessionOptions{})
	type args struct {
		Name string `json:"name"`
	}
	tool := tools.MustTyped("t", "", workspace.Typed(s, func(_ context.Context, _ *tools.Call, ws *workspace.Workspace, in args) (*tools.Result, error) {
		return tools.Text(in.Name + " in " + filepath.Base(ws.Dir())), nil
	}))
	if tool.OutputSchema != nil {
		t.Errorf("output schema %s; want none", tool.OutputSchema)
	}
	call := sessionCall("", "s1")
	call.Arguments = json.RawMessage(`{"name":"x"}`)
	res, err := tool.Handler(t.Context(), call)
	if want := "x in " + s.FolderName("", "s1"); err != nil || res.IsError || res.Content[0].Text != want {
		t.Errorf("result %+v, error %v; want %q", res, err, want)
	}
	call = sessionCall("", "")
	call.Arguments = json.RawMessage(`{"name":"x"}`)
	res, err = tool.Handler(t.Context(), call)
	if err != nil || !res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) ||
		!strings.Contains(res.Content[0].Text, "a session is required") {
		t.Errorf("without a session: result %+v, error %v; want INVALID_ARGUMENTS saying a session is required", res, err)
	}
	if entries := sessionFolders(root); len(entries) != 1 {
		t.Errorf("the root holds %v; want the one session's folder", entries)
	}
}

// TestSessionsSweep checks that an idle session's folder is removed after
// the TTL, that one a call is using is not, whatever its age, and that the
// session's next call gets a fresh folder.
func TestSessionsSweep(t *testing.T) {
	t.Parallel()
	var clk clock
	s, _ := openSessions(t, workspace.SessionOptions{Now: clk.now})
	alice, release := resolve(t, s, "", "alice")
	if _, err := alice.WriteFile("old.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	release()
	release() // a second release is harmless
	bob, releaseBob := resolve(t, s, "", "bob")

	clk.advance(ttl / 2)
	s.Sweep()
	if !exists(alice.Dir()) || !exists(bob.Dir()) {
		t.Fatal("a folder was removed before its session was idle for the TTL")
	}
	clk.advance(ttl)
	s.Sweep()
	if exists(alice.Dir()) {
		t.Error("alice's folder is still there after the TTL")
	}
	if _, err := bob.WriteFile("busy.txt", []byte("x")); err != nil || !exists(bob.Dir()) {
		t.Errorf("bob's folder, in use, was swept: %v", err)
	}
	releaseBob()
	s.Sweep() // bob was used just now
	if !exists(bob.Dir()) {
		t.Error("bob's folder was removed right after its call")
	}
	clk.advance(ttl + time.Second)
	s.Sweep()
	if exists(bob.Dir()) {
		t.Error("bob's folder is still there after the TTL")
	}

	again, release := resolve(t, s, "", "alice")
	defer release()
	if again.Dir() != alice.Dir() {
		t.Errorf("alice's folder moved: %s, was %s", again.Dir(), alice.Dir())
	}
	if _, err := again.Root().Stat("old.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("alice's new folder holds the swept one's file: %v", err)
	}
}

// TestSessionsSweepInBackground checks the timer: with a short TTL an
// idle folder goes without anyone calling Sweep.
func TestSessionsSweepInBackground(t *testing.T) {
	t.Parallel()
	s, _ := openSessions(t, workspace.SessionOptions{TTL: 50 * time.Millisecond, SweepEvery: 10 * time.Millisecond})
	ws, release := resolve(t, s, "", "alice")
	release()
	deadline := time.Now().Add(10 * time.Second)
	for exists(ws.Dir()) {
		if time.Now().After(deadline) {
			t.Fatal("the idle folder was not swept")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionsSweepAtStart checks that opening removes what a previous run
// left: folders its record says were idle past the TTL and half-removed
// ones; and keeps recent folders, folders the record does not know (counted
// as used when first seen, whatever their modification time says), and
// anything that is not a session folder.
func TestSessionsSweepAtStart(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	var clk clock
	clk.advance(-2 * ttl)
	s, err := workspace.OpenSessions(root, workspace.SessionOptions{TTL: ttl, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	old := s.FolderName("", "old")
	_, release := resolve(t, s, "", "old")
	release()
	s.Close()
	unknown := strings.Repeat("0123456789abcdef", 2)
	for _, p := range []string{unknown + "/sub", ".toolwire-trash-0123/sub", "operator-notes"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * ttl)
	for _, p := range []string{unknown, "operator-notes"} {
		if err := os.Chtimes(filepath.Join(root, p), long, long); err != nil {
			t.Fatal(err)
		}
	}
	s, err = workspace.OpenSessions(root, workspace.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for p, want := range map[string]bool{old: false, ".toolwire-trash-0123": false, unknown: true, "operator-notes": true} {
		if got := exists(filepath.Join(root, p)); got != want {
			t.Errorf("%s exists: %v; want %v", p, got, want)
		}
	}
}

// TestSessionsModTimeIgnored checks that a folder's modification time,
// which a session's own commands can set, never decides its sweep: a
// session used just now whose folder claims to be old survives a sweep and
// a restart.
func TestSessionsModTimeIgnored(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := workspace.OpenSessions(root, workspace.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ws, release := resolve(t, s, "", "alice")
	if _, err := ws.WriteFile("notes.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	release()
	long := time.Now().Add(-10 * ttl)
	if err := os.Chtimes(ws.Dir(), long, long); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if !exists(ws.Dir()) {
		t.Fatal("a sweep removed a folder used just now, going by its backdated modification time")
	}
	s.Close()
	s, err = workspace.OpenSessions(root, workspace.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !exists(filepath.Join(ws.Dir(), "notes.txt")) {
		t.Error("the next run removed a folder used just now, going by its backdated modification time")
	}
}

// TestSessionsKeyedNames checks that folder names are keyed: the key made
// in the root on first start is kept across restarts, another key gives
// other names, and no name is the unkeyed hash of the caller and session.
func TestSessionsKeyedNames(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := workspace.OpenSessions(root, workspace.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := s.FolderName("", "alice")
	s.Close()
	info, err := os.Stat(filepath.Join(root, ".toolwire-key"))
	if err != nil || info.Mode().Perm() != 0o600 || info.Size() != 32 {
		t.Fatalf("the key file: %v, %v; want 32 bytes, mode 0600", info, err)
	}
	s, err = workspace.OpenSessions(root, workspace.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again := s.FolderName("", "alice"); again != name {
		t.Errorf("after a restart alice's folder is %s; was %s", again, name)
	}
	other := workspace.FolderName([]byte("another key, another server...."), "", "alice")
	sum := sha256.Sum256([]byte(strconv.Quote("") + "/alice"))
	if other == name || name == hex.EncodeToString(sum[:])[:32] {
		t.Errorf("folder names %s (other key %s) do not depend on the key", name, other)
	}
	keyFile := filepath.Join(t.TempDir(), "session.key")
	if err := os.WriteFile(keyFile, []byte("a key kept like the tokens, 32 b"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := workspace.OpenSessions(t.TempDir(), workspace.SessionOptions{KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if got, want := k.FolderName("", "alice"), workspace.FolderName([]byte("a key kept like the tokens, 32 b"), "", "alice"); got != want {
		t.Errorf("with a key file: %s; want %s", got, want)
	}
	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := workspace.OpenSessions(t.TempDir(), workspace.SessionOptions{KeyFile: short}); err == nil || !strings.Contains(err.Error(), "want at least 16") {
		if s != nil {
			s.Close()
		}
		t.Errorf("a 5-byte key file: %v; want an error saying it is too short", err)
	}
}

// TestSessionsCloseKeepsLastUse checks that a folder's modification time
// records its session's last use, so the next run's first sweep judges it
// by that and not by when the server stopped.
func TestSessionsCloseKeepsLastUse(t *testing.T) {
	t.Parallel()
	var clk clock
	clk.advance(-2 * ttl) // the session was last used long ago
	root := t.TempDir()
	s, err := workspace.OpenSessions(root, workspace.SessionOptions{TTL: ttl, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ws, release := resolve(t, s, "", "alice")
	release()
	s.Close()
	if !exists(ws.Dir()) {
		t.Fatal("Close removed the folder")
	}
	s, err = workspace.OpenSessions(root, workspace.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if exists(ws.Dir()) {
		t.Error("the next run kept a folder idle for twice the TTL")
	}
}

// TestSessionsMaxOpen checks that idle sessions past MaxOpen have their
// handle closed (the least recently used first) and reopen on their next
// call, while a session in use keeps its handle.
func TestSessionsMaxOpen(t *testing.T) {
	t.Parallel()
	s, _ := openSessions(t, workspace.SessionOptions{MaxOpen: 2})
	busy, releaseBusy := resolve(t, s, "", "busy")
	defer releaseBusy()
	first, release := resolve(t, s, "", "first")
	release()
	for _, id := range []string{"second", "third"} {
		_, release := resolve(t, s, "", id)
		release()
	}
	if _, err := first.Root().Stat("."); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the least recently used idle session's handle: %v; want it closed", err)
	}
	if _, err := busy.Root().Stat("."); err != nil {
		t.Errorf("the session in use lost its handle: %v", err)
	}
	again, release := resolve(t, s, "", "first")
	defer release()
	if _, err := again.Root().Stat("."); err != nil || again.Dir() != first.Dir() {
		t.Errorf("reopened %s: %v; want %s open", again.Dir(), err, first.Dir())
	}
}

// TestSessionsSymlinkedFolder plants a symlink where a session's folder
// would be, pointing at another session's folder: the session gets an
// error, not the other's folder.
func TestSessionsSymlinkedFolder(t *testing.T) {
	t.Parallel()
	s, root := openSessions(t, workspace.SessionOptions{})
	alice, release := resolve(t, s, "", "alice")
	defer release()
	if _, err := alice.WriteFile("secret.txt", []byte("alice's")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(alice.Dir(), filepath.Join(root, s.FolderName("", "mallory"))); err != nil {
		t.Fatal(err)
	}
	if ws, _, err := s.Resolve(sessionCall("", "mallory")); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("mallory got %v, %v; want an error saying its folder is not a folder", ws, err)
	}
}

// TestSessionsClose checks that Close refuses new calls, lets a call in
// flight finish in its folder, and closes that folder when it is released.
func TestSessionsClose(t *testing.T) {
	t.Parallel()
	s, _ := openSessions(t, workspace.SessionOptions{})
	ws, release := resolve(t, s, "", "alice")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resolve(sessionCall("", "bob")); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("Resolve after Close: %v; want an error saying the server is shutting down", err)
	}
	if _, err := ws.WriteFile("late.txt", []byte("x")); err != nil {
		t.Errorf("a call in flight could not finish: %v", err)
	}
	release()
	if _, err := ws.Root().Stat("."); !errors.Is(err, os.ErrClosed) {
		t.Errorf("after the last release: %v; want the handle closed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestSessionsConcurrent runs calls of a few sessions from many goroutines
// while sweeps run with a clock jumping past the TTL: every call finds its
// folder in place for as long as it holds it (run with -race).
func TestSessionsConcurrent(t *testing.T) {
	t.Parallel()
	var clk clock
	s, _ := openSessions(t, workspace.SessionOptions{Now: clk.now, MaxOpen: 2})
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				clk.advance(2 * ttl)
				s.Sweep()
			}
		}
	})
	var calls sync.WaitGroup
	for g := range 8 {
		calls.Go(func() {
			for i := range 50 {
				id := []string{"a", "b", "c", "d"}[(g+i)%4]
				ws, release, err := s.Resolve(sessionCall("", id))
				if err != nil {
					t.Error(err)
					return
				}
				name := filepath.Join("d", id)
				if _, err := ws.WriteFile(name, []byte(id)); err != nil {
					t.Errorf("write in %s's folder: %v", id, err)
				} else if b, err := ws.Root().ReadFile(name); err != nil || string(b) != id {
					t.Errorf("read back in %s's folder: %q, %v", id, b, err)
				}
				release()
			}
		})
	}
	calls.Wait()
	close(stop)
	sweeps.Wait()
}

// TestSessionsSweepReadOnly checks that a folder a command left without
// write or read permission does not keep an idle session's folder (run as a
// user other than root: root ignores the permissions anyway).
func TestSessionsSweepReadOnly(t *testing.T) {
	t.Parallel()
	var clk clock
	s, root := openSessions(t, workspace.SessionOptions{Now: clk.now})
	ws, release := resolve(t, s, "", "alice")
	if _, err := ws.WriteFile("locked/inner/file.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"locked/inner": 0o000, "locked": 0o500} {
		if err := os.Chmod(filepath.Join(ws.Dir(), p), mode); err != nil {
			t.Fatal(err)
		}
	}
	release()
	clk.advance(2 * ttl)
	s.Sweep()
	if entries := sessionFolders(root); len(entries) != 0 {
		t.Errorf("the root still holds %v; want the idle folder with read-only folders inside removed", entries)
	}
}

// TestSessionsMaxSessions checks the bound on session folders: a new
// session past it gets an error naming the limit, existing sessions go on,
// and a sweep makes room.
func TestSessionsMaxSessions(t *testing.T) {
	t.Parallel()
	var clk clock
	s, _ := openSessions(t, workspace.SessionOptions{Now: clk.now, MaxSessions: 2, MaxOpen: 1})
	for _, id := range []string{"a", "b"} {
		_, release := resolve(t, s, "", id)
		release()
	}
	if _, _, err := s.Resolve(sessionCall("", "c")); err == nil || !strings.Contains(err.Error(), "its limit") {
		t.Errorf("a third session: %v; want an error naming the limit", err)
	}
	_, release := resolve(t, s, "", "a") // its handle was closed (MaxOpen 1); its folder is there
	release()
	clk.advance(2 * ttl)
	s.Sweep()
	_, release = resolve(t, s, "", "c")
	release()
}

// TestSessionsMaxSessionsPerCaller: one caller making sessions until
// MaxSessions is reached refused every other caller's new sessions for a
// TTL. A caller now holds at most its share (its own sessions still
// served, a new one refused naming the caller's limit), other callers go
// on, the share survives a restart (the record notes whose each folder
// is), and a swept session frees its place. The anonymous caller is bound
// by MaxSessions alone.
func TestSessionsMaxSessionsPerCaller(t *testing.T) {
	t.Parallel()
	var clk clock
	opts := workspace.SessionOptions{Now: clk.now, TTL: ttl, MaxSessions: 10, MaxSessionsPerCaller: 2, Key: []byte("0123456789abcdef0123456789abcdef")}
	s, root := openSessions(t, opts)
	for _, id := range []string{"a", "b"} {
		_, release := resolve(t, s, "bob", id)
		release()
	}
	if _, _, err := s.Resolve(sessionCall("bob", "c")); err == nil || !strings.Contains(err.Error(), "its limit for one caller") {
		t.Errorf("bob's third session: %v; want an error naming the caller's limit", err)
	}
	_, release := resolve(t, s, "bob", "a") // his own: still served
	release()
	_, release = resolve(t, s, "alice", "a")
	release()
	for _, id := range []string{"1", "2", "3"} {
		_, release := resolve(t, s, "", id)
		release()
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.SweepEvery = 24 * time.Hour
	s, err := workspace.OpenSessions(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, _, err := s.Resolve(sessionCall("bob", "c")); err == nil {
		t.Error("after a restart, bob's third session was made")
	}
	clk.advance(2 * ttl)
	s.Sweep()
	_, release = resolve(t, s, "bob", "c")
	release()
}

// BenchmarkResolve measures what a per-session workspace adds to a small
// file read: the shared workspace, a session's cached workspace, and a
// session's first call (which makes and opens its folder).
func BenchmarkResolve(b *testing.B) {
	root, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	shared, err := workspace.Open(root)
	if err != nil {
		b.Fatal(err)
	}
	defer shared.Close()
	s, err := workspace.OpenSessions(b.TempDir(), workspace.SessionOptions{SweepEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ws, release, err := s.Resolve(sessionCall("", "bench"))
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range []*workspace.Workspace{shared, ws} {
		if _, err := w.WriteFile("f.txt", []byte("hello\n")); err != nil {
			b.Fatal(err)
		}
	}
	release()
	read := func(b *testing.B, r workspace.Resolver, call func(i int) *tools.Call) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ws, release, err := r.Resolve(call(i))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ws.Root().ReadFile("f.txt"); err != nil && !errors.Is(err, os.ErrNotExist) {
				b.Fatal(err)
			}
			release()
			i++
		}
	}
	b.Run("shared", func(b *testing.B) {
		read(b, shared, func(int) *tools.Call { return sessionCall("", "bench") })
	})
	b.Run("session", func(b *testing.B) {
		read(b, s, func(int) *tools.Call { return sessionCall("", "bench") })
	})
	b.Run("new session", func(b *testing.B) {
		read(b, s, func(i int) *tools.Call { return sessionCall("", fmt.Sprint("new-", i)) })
	})
}

// sessionFolders lists what the root holds but the key and the record of
// last uses.
func sessionFolders(root string) []string {
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		if n := e.Name(); n != ".toolwire-key" && n != ".toolwire-sessions" {
			names = append(names, n)
		}
	}
	return names
}
