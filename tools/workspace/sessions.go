package workspace

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolwire/toolwire/tools"
)

// SessionOptions configure Sessions. Zero values mean the defaults.
type SessionOptions struct {
	// TTL is how long a session may be idle (no call using its workspace)
	// before its folder is removed (default 24h).
	TTL time.Duration
	// MaxOpen bounds the idle sessions whose folder handle stays open for
	// the next call; past it the least recently used is closed (its folder
	// stays). Sessions with a call running are never closed (default 1024).
	MaxOpen int
	// MaxSessions bounds the session folders under the root; a new
	// session's call past it gets an error result until sweeps make room
	// (default 100000).
	MaxSessions int
	// SweepEvery is how often idle folders are looked for (default a
	// quarter of TTL, at most a minute).
	SweepEvery time.Duration
	// Logger receives removals (debug) and failures (warn); nil discards.
	Logger *slog.Logger
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
}

func (o SessionOptions) withDefaults() SessionOptions {
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.MaxOpen <= 0 {
		o.MaxOpen = 1024
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 100000
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = min(o.TTL/4, time.Minute)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Sessions is the Resolver that gives each session a workspace of its own:
// a folder under one root, made on the session's first call and removed
// once the session has been idle for the TTL. The folder's name is a hash
// of the caller and the session ID, never the ID itself, so no session ID
// can name a path, and two callers' sessions never share a folder.
//
// Each folder is reached through its own os.Root, opened on the folder
// itself, so a session's paths and symlinks resolve inside its folder and
// never reach a sibling. Open folders are kept for the next call and
// reference-counted, so a sweep never removes a folder a call is using.
type Sessions struct {
	root *os.Root // the folder holding the sessions' folders
	dir  string   // its absolute path, symlinks resolved
	opts SessionOptions

	mu      sync.Mutex
	open    map[string]*session // by folder name
	folders int                 // session folders under the root, as last counted
	closed  bool

	stop chan struct{}
	done chan struct{}
}

// session is one session's open workspace.
type session struct {
	ws      *Workspace
	refs    int       // calls using it
	used    time.Time // when a call last took or released it
	touched time.Time // the folder's modification time as last set
}

// folderLen is the length of a session folder's name: 128 bits of SHA-256
// in hex.
const folderLen = 32

// trashPrefix starts the name a folder is renamed to before it is removed,
// so a new call of its session gets a fresh folder at once; a leftover from
// a crash is removed by the next sweep.
const trashPrefix = ".toolwire-trash-"

// OpenSessions serves per-session workspaces under dir, which must be an
// existing folder. It removes folders a previous run left idle for longer
// than the TTL, then sweeps in the background until Close.
func OpenSessions(dir string, opts SessionOptions) (*Sessions, error) {
	ws, err := Open(dir)
	if err != nil {
		return nil, err
	}
	s := &Sessions{
		root: ws.root, dir: ws.real, opts: opts.withDefaults(),
		open: map[string]*session{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.Sweep()
	go s.sweepLoop()
	return s, nil
}

// Dir is the folder holding the sessions' folders.
func (s *Sessions) Dir() string { return s.dir }

// FolderName is the name of the folder of the caller's session id: a hash,
// the same on every replica and across restarts.
func FolderName(caller, id string) string {
	sum := sha256.Sum256([]byte(strconv.Quote(caller) + "/" + id))
	return hex.EncodeToString(sum[:])[:folderLen]
}

// Resolve returns the workspace of the call's session, making its folder
// on first use. A call without a session gets ErrNoSession.
func (s *Sessions) Resolve(call *tools.Call) (*Workspace, func(), error) {
	if call == nil || call.SessionID == "" {
		return nil, nil, ErrNoSession
	}
	name := FolderName(call.Caller, call.SessionID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errors.New("the session's workspace is unavailable: the server is shutting down")
	}
	e := s.open[name]
	if e == nil && s.folders >= s.opts.MaxSessions && !s.hasFolder(name) {
		return nil, nil, fmt.Errorf("this server holds %d sessions' workspaces, its limit: try again once idle sessions have been removed", s.folders)
	}
	if e == nil {
		ws, err := s.openFolder(name)
		if err != nil {
			s.opts.Logger.Warn("cannot make a session's workspace", "folder", name, "error", err)
			return nil, nil, fmt.Errorf("cannot make the session's workspace: %v", err)
		}
		e = &session{ws: ws}
		s.open[name] = e
	}
	e.refs++
	e.used = s.opts.Now()
	s.trim() // after taking e, which is then not idle
	var once sync.Once
	return e.ws, func() { once.Do(func() { s.release(e) }) }, nil
}

// hasFolder reports whether the session folder name exists. Called with
// s.mu held.
func (s *Sessions) hasFolder(name string) bool {
	_, err := s.root.Lstat(name)
	return err == nil
}

func (s *Sessions) release(e *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.refs--
	e.used = s.opts.Now()
	if s.closed && e.refs == 0 {
		e.ws.Close()
	}
}

// openFolder makes (or finds) the session folder name and opens it. The
// folder must be a real folder, not a symlink: os.Root would follow a
// symlink to a sibling, so Lstat and SameFile pin the folder opened to the
// one found.
func (s *Sessions) openFolder(name string) (*Workspace, error) {
	switch err := s.root.Mkdir(name, 0o700); {
	case err == nil:
		s.folders++
	case !errors.Is(err, fs.ErrExist):
		return nil, err
	}
	found, err := s.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !found.IsDir() {
		return nil, fmt.Errorf("%s is not a folder (%s)", name, found.Mode().Type())
	}
	r, err := s.root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	if opened, err := r.Stat("."); err != nil || !os.SameFile(found, opened) {
		r.Close()
		return nil, fmt.Errorf("%s changed while it was being opened", name)
	}
	dir := filepath.Join(s.dir, name)
	return &Workspace{root: r, dir: dir, real: dir}, nil
}

// trim closes the least recently used idle session once more than MaxOpen
// are open. Called with s.mu held, after each new one.
func (s *Sessions) trim() {
	if len(s.open) <= s.opts.MaxOpen {
		return
	}
	var oldest string
	for name, e := range s.open {
		if e.refs == 0 && (oldest == "" || e.used.Before(s.open[oldest].used)) {
			oldest = name
		}
	}
	if oldest != "" {
		s.forget(oldest)
	}
}

// forget closes an idle session's folder handle and leaves the folder's
// modification time at its last use, which is what a later sweep (or the
// next run's first) reads. Called with s.mu held.
func (s *Sessions) forget(name string) {
	e := s.open[name]
	s.touch(name, e)
	e.ws.Close()
	delete(s.open, name)
}

func (s *Sessions) touch(name string, e *session) {
	if e.used.After(e.touched) {
		if err := s.root.Chtimes(name, e.used, e.used); err == nil {
			e.touched = e.used
		}
	}
}

func (s *Sessions) sweepLoop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep removes the folders of sessions idle for longer than the TTL, and
// leftovers of removals a crash interrupted. It reads the folder in chunks,
// so a root holding many sessions costs bounded memory. The background
// sweep calls it; tests may too.
func (s *Sessions) Sweep() {
	d, err := s.root.Open(".")
	if err != nil {
		s.opts.Logger.Warn("cannot sweep session workspaces", "error", err)
		return
	}
	defer d.Close()
	kept := 0
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			if s.sweepOne(name) {
				kept++
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.opts.Logger.Warn("cannot sweep session workspaces", "error", err)
				return
			}
			break
		}
	}
	// A recount corrects for folders removed behind our back; folders made
	// during the sweep may be missed until the next one.
	s.mu.Lock()
	s.folders = kept
	s.mu.Unlock()
}

// sweepOne removes the folder name if its session has been idle too long,
// and reports whether a session folder remains. The decision and the rename
// are made under s.mu, so no call can take the folder between them; the
// slow removal is not.
func (s *Sessions) sweepOne(name string) (kept bool) {
	switch {
	case strings.HasPrefix(name, trashPrefix):
		s.remove(name)
		return false
	case !isFolderName(name):
		return false // not ours: leave it
	}
	s.mu.Lock()
	now := s.opts.Now()
	if e := s.open[name]; e != nil {
		if e.refs > 0 || now.Sub(e.used) < s.opts.TTL {
			s.touch(name, e)
			s.mu.Unlock()
			return true
		}
		s.forget(name)
	} else if info, err := s.root.Lstat(name); err != nil || now.Sub(info.ModTime()) < s.opts.TTL {
		s.mu.Unlock()
		return err == nil
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	trash := trashPrefix + hex.EncodeToString(suffix[:])
	err := s.root.Rename(name, trash)
	s.mu.Unlock()
	if err != nil {
		s.opts.Logger.Warn("cannot remove an idle session's workspace", "folder", name, "error", err)
		return true
	}
	s.opts.Logger.Debug("removed an idle session's workspace", "folder", name, "ttl", s.opts.TTL)
	s.remove(trash)
	return false
}

// remove removes the folder name and all it holds. A command may have left
// folders without write permission, which RemoveAll cannot empty when the
// server is not root, so on failure the folders are made writable and the
// removal tried once more.
func (s *Sessions) remove(name string) {
	if s.root.RemoveAll(name) == nil {
		return
	}
	// WalkDir visits a folder before reading it, so each is writable and
	// readable by the time it is read.
	_ = fs.WalkDir(s.root.FS(), name, func(p string, d fs.DirEntry, _ error) error {
		if d != nil && d.IsDir() {
			_ = s.root.Chmod(p, 0o700)
		}
		return nil
	})
	if err := s.root.RemoveAll(name); err != nil {
		s.opts.Logger.Warn("cannot remove an idle session's workspace", "folder", name, "error", err)
	}
}

func isFolderName(name string) bool {
	if len(name) != folderLen {
		return false
	}
	for _, c := range []byte(name) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Close stops the sweep and closes the folders no call is using; the rest
// close when their calls release them. Folders stay for the next run.
func (s *Sessions) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range s.open {
		if e.refs == 0 {
			s.forget(name)
		}
	}
	return s.root.Close()
}
