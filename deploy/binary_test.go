package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// image is the toolwire binary built as the Dockerfile builds it, once for
// the tests that need it: TestImageBinaryIsStatic checks it, and
// TestHelmConfigBootsServer boots it as the chart's pod would (the pod runs
// this very build). Each build links the whole server, which takes minutes
// on a loaded machine.
var image struct {
	once     sync.Once
	dir, bin string
	err      error
}

// imageBinary returns the binary the Dockerfile's build instruction makes
// (see TestImageBinaryIsStatic, which holds the two the same).
func imageBinary(t *testing.T) string {
	t.Helper()
	image.once.Do(func() {
		dir, err := os.MkdirTemp("", "toolwire-deploy-test")
		if err != nil {
			image.err = err
			return
		}
		image.dir = dir
		bin := filepath.Join(dir, "toolwire")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/toolwire")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			image.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		image.bin = bin
	})
	if image.err != nil {
		t.Fatal(image.err)
	}
	return image.bin
}

// removingImage runs the tests, then removes the shared binary.
type removingImage struct{ *testing.M }

func (m removingImage) Run() int {
	defer func() {
		if image.dir != "" {
			os.RemoveAll(image.dir)
		}
	}()
	return m.M.Run()
}
