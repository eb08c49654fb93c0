package runcommand

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// heldLock is the played server's lock, held for its life as the real
// server's is (calls.lock): an *os.File no longer referenced is closed by
// its finalizer when the collector runs, which let its lock go and the
// test's sweep remove a running server's folder (a flake under load).
var heldLock *os.File

// A test binary started with TOOLWIRE_TEST_CALLS_SERVER=base plays a server:
// it makes its calls' folder in base and a call's TMPDIR with a file in it,
// prints the TMPDIR, and waits to be killed.
func init() {
	base := os.Getenv("TOOLWIRE_TEST_CALLS_SERVER")
	if base == "" {
		return
	}
	dir, lock, _, err := makeCallsDir(base)
	heldLock = lock
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	tmp, err := os.MkdirTemp(dir, "call-")
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "left-by-the-command"), []byte("secret"), 0o600)
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	runtime.GC() // the collector runs, as it may at any time
	os.Stdout.WriteString(tmp + "\n")
	time.Sleep(time.Hour)
	os.Exit(0)
}

// startServer starts a process that made a call's TMPDIR in base, and
// returns it and the TMPDIR.
func startServer(t *testing.T, base string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TOOLWIRE_TEST_CALLS_SERVER="+base)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the server process said nothing: %v", err)
	}
	return cmd, line[:len(line)-1]
}

// TestCallsOfAKilledServerAreRemoved: what the commands of a server killed
// mid-call left in their TMPDIRs is removed by the next server to start
// there, and nothing of a server still running is.
func TestCallsOfAKilledServerAreRemoved(t *testing.T) {
	base := t.TempDir()
	killed, killedTmp := startServer(t, base)
	_, runningTmp := startServer(t, base)
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()

	// Folders with no lock: one a server was killed in before locking it
	// (old), one a server is making now (new).
	oldNoLock := filepath.Join(base, callsPrefix+"oldnolock")
	newNoLock := filepath.Join(base, callsPrefix+"newnolock")
	for _, d := range []string{oldNoLock, newNoLock} {
		if err := os.MkdirAll(filepath.Join(d, "call-1"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	hour := time.Now().Add(-time.Hour)
	if err := os.Chtimes(oldNoLock, hour, hour); err != nil {
		t.Fatal(err)
	}
	// Another user's folder of the name, lock free and old, is not this
	// server's to remove.
	foreign := filepath.Join(base, callsPrefix+"foreign")
	if os.Geteuid() == 0 {
		if err := os.Mkdir(foreign, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(foreign, hour, hour); err != nil {
			t.Fatal(err)
		}
	}

	own, lock, swept, err := makeCallsDir(base)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	<-swept

	gone := func(p string) bool { _, err := os.Lstat(p); return os.IsNotExist(err) }
	if !gone(filepath.Dir(killedTmp)) {
		t.Errorf("the killed server's folder %s is still there", filepath.Dir(killedTmp))
	}
	if !gone(oldNoLock) {
		t.Errorf("an hour-old folder without a lock is still there")
	}
	for _, p := range []string{runningTmp, newNoLock, own} {
		if gone(p) {
			t.Errorf("%s was removed", p)
		}
	}
	if os.Geteuid() == 0 && gone(foreign) {
		t.Errorf("another uid's folder was removed")
	}
	if info, err := os.Stat(own); err != nil || info.Mode().Perm() != 0o711 {
		t.Errorf("the server's folder: %v, %v; want mode 0711 (searchable, not listable)", info, err)
	}
}
