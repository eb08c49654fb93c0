package testenv

import (
	"errors"
	"path/filepath"
	"strconv"
	"testing"
)

// The kernel can offer a port just closed to the next listener (hundreds
// of times in 3,000 picks here); listenable does not hand one out twice
// within a minute.
func TestListenableNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 1000 {
		port, err := listenable()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}

// A redis-server started on a port another server holds is not taken for
// the other, which answers PING there as well: launchRedis says the port
// was taken, so its callers start it on another.
func TestLaunchRedisOnATakenPort(t *testing.T) {
	other := StartRedis(t)
	dir := t.TempDir()
	args := []string{"--port", strconv.Itoa(other.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", logPath(dir)}
	p, err := launchRedis(other.Addr, logPath(dir), args)
	if !errors.Is(err, errPortTaken) {
		if p != nil {
			p.kill()
		}
		t.Fatalf("launchRedis on %s, which another redis-server holds: %v, want errPortTaken", other.Addr, err)
	}
	// On a port of its own it starts, and the same log's earlier failure
	// is not read as this start's.
	port := freePort(t)
	args[1] = strconv.Itoa(port)
	p, err = launchRedis("127.0.0.1:"+args[1], logPath(dir), args)
	if err != nil {
		t.Fatal(err)
	}
	p.kill()
	if _, err := launchRedis("127.0.0.1:1", filepath.Join(dir, "none.log"), []string{"--port", "1", "--bind", "127.0.0.1", "--no-such-option"}); err == nil || errors.Is(err, errPortTaken) {
		t.Fatalf("a server that cannot start: %v, want an error other than errPortTaken", err)
	}
}
