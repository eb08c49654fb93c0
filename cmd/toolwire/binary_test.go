package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built is the toolwire binary the tests that run it as a child process
// share: each build links the whole server, which on a loaded machine
// takes minutes, and before they shared it eight tests built it one
// after another (each before its t.Parallel).
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildToolwire returns the toolwire binary for a test that runs it; the
// first call builds it, the others wait for that build and share it.
func buildToolwire(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "toolwire-cmd-test")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		bin := filepath.Join(dir, "toolwire")
		if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// removingBuilt runs the tests, then removes the shared binary.
type removingBuilt struct{ *testing.M }

func (m removingBuilt) Run() int {
	defer func() {
		if built.dir != "" {
			os.RemoveAll(built.dir)
		}
	}()
	return m.M.Run()
}
