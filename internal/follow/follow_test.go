package follow_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/follow"
)

// TestFiles: a value is read again when its file's modification time
// changes, not when it stays; the last good value stays while the file is
// missing or unreadable; an error comes back only before any read
// succeeded; and many readers at once see a whole value.
func TestFiles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "value")
	reads := 0
	f := follow.New(func() (string, error) {
		reads++
		b, err := os.ReadFile(file)
		if err == nil && string(b) == "bad" {
			err = errors.New("bad value")
		}
		return string(b), err
	}, file)
	if _, err := f.Get(); err == nil {
		t.Fatal("Get of a missing file before any read: want its error")
	}
	at := time.Now().Add(-time.Hour) // times that have settled (not racy)
	write := func(s string, mod time.Duration) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, at.Add(mod), at.Add(mod)); err != nil {
			t.Fatal(err)
		}
		f.Recheck()
	}
	get := func() string {
		t.Helper()
		v, err := f.Get()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	write("one", time.Minute)
	if got := get(); got != "one" {
		t.Fatalf("Get = %q, want one", got)
	}
	n := reads
	f.Recheck()
	if got := get(); got != "one" || reads != n {
		t.Errorf("unchanged file: %q after %d more reads, want one and none", got, reads-n)
	}
	write("two", 2*time.Minute)
	if got := get(); got != "two" {
		t.Errorf("changed file: %q, want two", got)
	}
	write("bad", 3*time.Minute)
	if got := get(); got != "two" {
		t.Errorf("a value that does not read: %q, want the last good, two", got)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	f.Recheck()
	if got := get(); got != "two" {
		t.Errorf("the file removed: %q, want the last good, two", got)
	}
	// Between looks, Get reads nothing; at a look, one reader reads.
	write("three", 4*time.Minute)
	n = reads
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if v, err := f.Get(); err != nil || (v != "two" && v != "three") {
					t.Errorf("Get = %q, %v", v, err)
				}
			}
		})
	}
	wg.Wait()
	if reads-n != 1 {
		t.Errorf("800 Gets after a change read the file %d times, want once (then not again for 10 s)", reads-n)
	}
}

// TestFilesRacyWrites: a file read in the same tick of the file system's
// clock as a write that follows (a truncation, then the new content) keeps
// its modification time, and its size when the content is as long; it is
// read again at the next look all the same, and once its time has settled
// it is not read again. A file renamed over it is read whatever its time
// and size.
func TestFilesRacyWrites(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "value")
	reads := 0
	f := follow.New(func() (string, error) {
		reads++
		b, err := os.ReadFile(file)
		return string(b), err
	}, file)
	write := func(name, s string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(name, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(name, mod, mod); err != nil {
			t.Fatal(err)
		}
		f.Recheck()
	}
	get := func(want string) {
		t.Helper()
		if v, err := f.Get(); err != nil || v != want {
			t.Fatalf("Get = %q, %v; want %q", v, err, want)
		}
	}
	tick := time.Now()
	write(file, "aaaa", tick)
	get("aaaa")
	write(file, "bbbb", tick) // the same time and size: a write in the same tick
	get("bbbb")

	settled := time.Now().Add(-time.Hour)
	write(file, "bbbb", settled)
	get("bbbb")
	n := reads
	f.Recheck()
	get("bbbb")
	if reads != n {
		t.Errorf("a settled, unchanged file was read %d more times, want none", reads-n)
	}

	next := filepath.Join(dir, "next")
	write(next, "cccc", settled) // the same time and size, another file
	if err := os.Rename(next, file); err != nil {
		t.Fatal(err)
	}
	get("cccc")
}
