// Package workspace confines the workspace tools to one folder. A Workspace
// holds an os.Root opened on the folder, and every file the tools touch is
// reached through it, so no path, symlink or chain of symlinks can lead out
// of the folder: os.Root resolves each component inside the root itself
// instead of trusting a string check.
//
// Paths the model gives are relative to the workspace folder. An absolute
// path is accepted when it names something inside the folder (the model often
// repeats paths a command printed) and is turned into the relative path; any
// other absolute path is refused.
//
// The tools get their workspace per call from a Resolver: a Workspace gives
// every call itself; Sessions gives each session a folder of its own.
//
// It imports only tools/ and the contract; like every built-in it never
// imports engine/, service/, sources/, store/ or client/.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/toolwire/toolwire/tools"
)

// Workspace is the folder the workspace tools work in. It is safe for
// concurrent use.
type Workspace struct {
	root *os.Root
	dir  string // absolute path as given, cleaned
	real string // dir with symlinks resolved
	// owner, when set, is the uid and gid the folder and everything the
	// workspace tools write in it belong to, and its commands run under.
	owner *Owner
	// limits bound what it may take of its disk; held is what its folder
	// holds, as the writes that limits bound keep it (room.go).
	limits Limits
	held   held

	rename func(dir *os.Root, oldname, newname string) error // nil: (*os.Root).Rename; tests interfere
}

// Open opens the workspace at dir, which must be an existing folder.
func Open(dir string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &Workspace{root: root, dir: abs, real: real}, nil
}

// Owner is a uid and gid of a session's own.
type Owner struct{ UID, GID int }

// Owner returns the uid and gid the workspace belongs to, or nil when its
// files belong to the server's.
func (w *Workspace) Owner() *Owner { return w.owner }

// Close releases the workspace's folder handle.
func (w *Workspace) Close() error { return w.root.Close() }

// Root is the os.Root every file access goes through.
func (w *Workspace) Root() *os.Root { return w.root }

// Dir is the workspace folder's absolute path with symlinks resolved.
func (w *Workspace) Dir() string { return w.real }

// ErrEscapes is the error of a path that leads outside the workspace.
var ErrEscapes = errors.New("path escapes the workspace")

// Rel turns a path the model gave into a path relative to the workspace
// folder, "." for the folder itself. It refuses, with ErrEscapes, paths that
// lead out of the folder by their text (.., absolute paths elsewhere) and
// paths holding a NUL byte. It is a courtesy that names the problem early:
// symlinks are followed, and refused when they lead out, only by os.Root,
// which every access goes through.
func (w *Workspace) Rel(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrEscapes, p)
	}
	if p == "" {
		return ".", nil
	}
	rel := p
	if filepath.IsAbs(p) {
		rel = w.relAbs(p)
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %s", ErrEscapes, p)
	}
	return filepath.Clean(rel), nil
}

// relAbs returns the absolute path p relative to the workspace folder, as
// given or with symlinks resolved, or p itself when it lies elsewhere.
func (w *Workspace) relAbs(p string) string {
	for _, dir := range []string{w.dir, w.real} {
		if rel, err := filepath.Rel(dir, p); err == nil && filepath.IsLocal(rel) {
			return rel
		}
		if filepath.Clean(p) == dir {
			return "."
		}
	}
	return p
}

// Display is how a listing shows the name or path p to the model: as it
// is, or, when it holds a control character (a newline, an escape, C1
// codes) or bytes that are not UTF-8, quoted as Go quotes a string
// ("evil\nsecret.txt  999"), so that a name a command made cannot forge
// lines of the listing or carry terminal escapes; the model passes the
// unquoted name back as a JSON string.
func Display(p string) string {
	if !utf8.ValidString(p) {
		return strconv.Quote(p)
	}
	for _, r := range p {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return strconv.Quote(p)
		}
	}
	return p
}

// Problem turns an error from a file operation on the model's path p into
// the error result the model reads: escapes, missing files and the like are
// named plainly.
func Problem(p string, err error) *tools.Result {
	return tools.Errorf("%s", Describe(p, err))
}

// Describe says what went wrong with the model's path p.
func Describe(p string, err error) string {
	if p == "" {
		p = "." // the workspace itself (run_command's cwd when none is given)
	}
	switch {
	case Exhausted(err):
		return fmt.Sprintf("cannot reach %s now: %s; try again shortly", p, Shortage(err))
	case errors.Is(err, ErrEscapes):
		return err.Error()
	case errors.Is(err, ErrNoRoom):
		return fmt.Sprintf("cannot write %s: %v", p, err)
	case escapes(err):
		return fmt.Sprintf("%v: %s (a symlink or .. leads outside)", ErrEscapes, p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("no such file or folder: %s", p)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Sprintf("not a folder: a parent of %s is a file", p)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Sprintf("%s is a folder, not a file", p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("permission denied: %s", p)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Sprintf("too many levels of symlinks: %s", p)
	case errors.Is(err, ErrNotRegular):
		return fmt.Sprintf("%s is or leads to a named pipe, socket or device, not a regular file", p)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %v", p, pe.Err)
	}
	return fmt.Sprintf("%s: %v", p, err)
}

// Exhausted reports whether err is the server short of what it needs to
// reach any file at all (its open files, the system's, kernel memory)
// rather than something about the file. Such a failure says nothing about
// the file, so a walk must not pass it over as "not there" (a search would
// answer "no files match") and a message must not read as the file's.
func Exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOBUFS)
}

// Shortage says what the server ran out of, for an Exhausted err.
func Shortage(err error) string {
	var errno syscall.Errno
	errors.As(err, &errno)
	switch errno {
	case syscall.EMFILE:
		return "the server has as many files open as it may (too many open files)"
	case syscall.ENFILE:
		return "the system has as many files open as it may (file table overflow)"
	default:
		return "the server is short of memory (" + errno.Error() + ")"
	}
}

// escapes reports whether err is os.Root refusing a path that leads out of
// the root. os does not export that error, so its message is the only mark.
func escapes(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err != nil && err.Error() == "path escapes from parent"
}
