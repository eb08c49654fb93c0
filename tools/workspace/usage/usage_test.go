package usage_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/toolwire/toolwire/tools/workspace/usage"
)

// TestMeasure measures a tree of two 64 KiB files, one with a second link
// (counted once), in a folder: four entries and the blocks of the files
// and folders; with a file limit of 2 the walk stops past it.
func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(sub, "b")} {
		if err := os.WriteFile(p, make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(sub, "a2")); err != nil {
		t.Fatal(err)
	}
	u := usage.Measure([]string{dir}, 0, 0)
	if u.Files != 5 || u.Bytes < 128<<10 || u.Bytes > 128<<10+64<<10 || u.Lost {
		t.Errorf("Measure = %+v; want 5 entries and 128 KiB of files, plus the folders' blocks", u)
	}
	if u := usage.Measure([]string{dir}, 0, 2); u.Files <= 2 || u.Files >= 5 {
		t.Errorf("Measure with at most 2 files = %+v; want it stopped past 2", u)
	}
}

// TestFree checks that Free reports the room statfs does, and fails on a
// path that does not exist.
func TestFree(t *testing.T) {
	free, err := usage.Free(t.TempDir())
	if err != nil || free == 0 {
		t.Errorf("Free = %d, %v; want the room left", free, err)
	}
	if _, err := usage.Free(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Free of a missing path: no error")
	}
}

// BenchmarkFree is what the free-space reserve costs a write, a command's
// start and each watchdog sample: one statfs.
func BenchmarkFree(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, err := usage.Free(dir); err != nil {
			b.Fatal(err)
		}
	}
}
