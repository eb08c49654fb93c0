package workspace

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	"syscall"
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
	// MaxSessionsPerCaller bounds the session folders one caller may hold,
	// so that no caller can take the whole of MaxSessions (or of the uid
	// range) and refuse every other caller's new sessions for a TTL; the
	// anonymous caller (authentication off: one tenant) is bound by
	// MaxSessions alone (default 1000).
	MaxSessionsPerCaller int
	// SweepEvery is how often idle folders are looked for (default a
	// quarter of TTL, at most a minute).
	SweepEvery time.Duration
	// Logger receives removals (debug) and failures (warn); nil discards.
	Logger *slog.Logger
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
	// Key keys the folders' names (HMAC-SHA256 of the caller and the
	// session ID), so that no one who lacks it can tell which folder is
	// whose. Nil: the key in KeyFile, made there (32 random bytes, mode
	// 0600) if missing, in the root when KeyFile is empty.
	Key []byte
	// KeyFile is where the key is kept when Key is nil; "" means
	// .toolwire-key in the root.
	KeyFile string
	// UIDs, when set, gives each session's folder a uid of its own from
	// the range (its gid the same number), which owns the folder and what
	// the workspace tools write in it; the session's commands run under it.
	// The server must be allowed to chown (root, or CAP_CHOWN).
	UIDs *IDRange
	// Limits bound what each session's folder may take of its disk (zero
	// values: none).
	Limits Limits
}

// IDRange is a range of uids, each used as a session's uid and gid.
type IDRange struct{ First, Last uint32 }

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
	if o.MaxSessionsPerCaller <= 0 {
		o.MaxSessionsPerCaller = 1000
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
// once the session has been idle for the TTL. The folder's name is an HMAC
// of the caller and the session ID under a key of the server's, never the
// ID itself, so no session ID can name a path, two callers' sessions never
// share a folder, and no one without the key can tell whose a folder is.
//
// When a session was last used is toolwire's own record (the file
// .toolwire-sessions in the root, written at each sweep and on Close),
// never a folder's modification time, which a session's own commands can
// set. A folder the record does not know (a crash, an older version) counts
// as used when it is first seen.
//
// Each folder is reached through its own os.Root, opened on the folder
// itself, so a session's paths and symlinks resolve inside its folder and
// never reach a sibling. Open folders are kept for the next call and
// reference-counted, so a sweep never removes a folder a call is using.
type Sessions struct {
	root *os.Root // the folder holding the sessions' folders
	dir  string   // its absolute path, symlinks resolved
	opts SessionOptions

	key []byte

	mu      sync.Mutex
	open    map[string]*session  // by folder name
	last    map[string]time.Time // when each folder's session was last used
	dirty   bool                 // last differs from the record on disk
	owners  map[uint32]string    // with UIDs: the folder each uid owns
	folders int                  // session folders under the root, as last counted
	// whose maps each folder made since the record began noting it to its
	// caller's tag (callerTag), and held counts them by tag: what
	// MaxSessionsPerCaller bounds. A folder of an older record is no
	// one's.
	whose  map[string]string
	held   map[string]int
	closed bool

	stop chan struct{}
	done chan struct{}
}

// session is one session's open workspace.
type session struct {
	ws   *Workspace
	refs int       // calls using it
	used time.Time // when a call last took or released it
}

// folderLen is the length of a session folder's name: 128 bits of SHA-256
// in hex.
const folderLen = 32

// recordName is the file, in the root, of when each session was last used;
// keyName is the default place of the folder names' key.
const (
	recordName = ".toolwire-sessions"
	keyName    = ".toolwire-key"
)

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
		root: ws.root, dir: ws.real, opts: opts.withDefaults(), key: opts.Key,
		open: map[string]*session{}, last: map[string]time.Time{}, whose: map[string]string{}, held: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if s.opts.UIDs != nil {
		s.owners = map[uint32]string{}
		if err := reachable(ws.real); err != nil {
			ws.Close()
			return nil, err
		}
	}
	if s.key == nil {
		if s.key, err = loadKey(ws.root, opts.KeyFile); err != nil {
			ws.Close()
			return nil, err
		}
	}
	if err := s.load(); err != nil {
		ws.Close()
		return nil, err
	}
	s.Sweep()
	go s.sweepLoop()
	return s, nil
}

// reachable checks that the session uids can reach their folders under
// root: root and every folder above it must be searchable by others. The
// root is made so (mode o+x, not o+r: a listing would name the folders); a
// folder above it is the operator's to fix.
func reachable(root string) error {
	info, err := os.Stat(root)
	if err != nil {
		return err
	}
	if info.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(root, info.Mode().Perm()|0o001); err != nil {
			return fmt.Errorf("letting the sessions' uids reach their folders under %s: %w", root, err)
		}
	}
	for d := filepath.Dir(root); ; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the sessions' uids cannot reach their folders under %s: %s is not searchable by other users (chmod o+x %s)", root, d, d)
		}
		if d == "/" || d == filepath.Dir(d) {
			return nil
		}
	}
}

// loadKey reads the folder names' key from file (in root when file is ""),
// making a new random one there if there is none.
func loadKey(root *os.Root, file string) ([]byte, error) {
	read := func() ([]byte, error) {
		if file != "" {
			return os.ReadFile(file)
		}
		return root.ReadFile(keyName)
	}
	key, err := read()
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		if file != "" {
			err = os.WriteFile(file, key, 0o600)
		} else {
			err = root.WriteFile(keyName, key, 0o600)
		}
		if err == nil {
			// Another replica sharing the root may have written first.
			key, err = read()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the sessions' folder key: %w", err)
	}
	if len(key) < 16 {
		return nil, fmt.Errorf("the sessions' folder key in %s is %d bytes; want at least 16", cmpOr(file, keyName), len(key))
	}
	return key, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// record is the file recordName: when each folder's session was last used,
// in Unix seconds, and whose it is (callerTag).
type record struct {
	LastUsed map[string]int64  `json:"last_used"`
	Callers  map[string]string `json:"callers,omitempty"`
}

// load reads the record; a missing one is empty.
func (s *Sessions) load() error {
	b, err := s.root.ReadFile(recordName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var r record
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		// Not fatal: folders count as used now, and the next save mends it.
		s.opts.Logger.Warn("cannot read when sessions were last used; counting every session folder as used now", "file", filepath.Join(s.dir, recordName), "error", err)
		return nil
	}
	for name, sec := range r.LastUsed {
		if isFolderName(name) {
			s.last[name] = time.Unix(sec, 0)
			if tag, ok := r.Callers[name]; ok {
				s.note(name, tag)
			}
		}
	}
	return nil
}

// callerTag names caller in the record without naming it: an HMAC under
// the folders' key, as their names are.
func (s *Sessions) callerTag(caller string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("caller:" + strconv.Quote(caller)))
	return hex.EncodeToString(m.Sum(nil))[:folderLen]
}

// note records that folder name is the caller tag's. Called with s.mu
// held (or before Sessions is shared).
func (s *Sessions) note(name, tag string) {
	if _, ok := s.whose[name]; ok {
		return
	}
	s.whose[name] = tag
	s.held[tag]++
}

// unnote forgets whose folder name was. Called with s.mu held.
func (s *Sessions) unnote(name string) {
	if tag, ok := s.whose[name]; ok {
		delete(s.whose, name)
		if s.held[tag]--; s.held[tag] <= 0 {
			delete(s.held, tag)
		}
	}
}

// save writes the record if it changed, atomically. Called with s.mu held.
func (s *Sessions) save() {
	if !s.dirty {
		return
	}
	r := record{LastUsed: make(map[string]int64, len(s.last)), Callers: make(map[string]string, len(s.whose))}
	for name, t := range s.last {
		r.LastUsed[name] = t.Unix()
	}
	for name, tag := range s.whose {
		r.Callers[name] = tag
	}
	b, _ := json.Marshal(r)
	tmp := recordName + ".tmp"
	err := s.root.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = s.root.Rename(tmp, recordName)
	}
	if err != nil {
		s.opts.Logger.Warn("cannot record when sessions were last used", "error", err)
		return
	}
	s.dirty = false
}

// Dir is the folder holding the sessions' folders.
func (s *Sessions) Dir() string { return s.dir }

// FolderName is the name of the folder of the caller's session id.
func (s *Sessions) FolderName(caller, id string) string { return FolderName(s.key, caller, id) }

// FolderName is the name of the folder of the caller's session id under
// key: an HMAC, the same on every replica sharing the key and across
// restarts.
func FolderName(key []byte, caller, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strconv.Quote(caller) + "/" + id))
	return hex.EncodeToString(m.Sum(nil))[:folderLen]
}

// Resolve returns the workspace of the call's session, making its folder
// on first use. A call without a session gets ErrNoSession.
func (s *Sessions) Resolve(call *tools.Call) (*Workspace, func(), error) {
	if call == nil || call.SessionID == "" {
		return nil, nil, ErrNoSession
	}
	name := s.FolderName(call.Caller, call.SessionID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errors.New("the session's workspace is unavailable: the server is shutting down")
	}
	e := s.open[name]
	if e == nil {
		// A folder whose handle is closed: a new session only if it is
		// not there, which is looked up only when a bound is reached.
		tag := ""
		if call.Caller != "" {
			tag = s.callerTag(call.Caller)
		}
		mine, all := tag != "" && s.held[tag] >= s.opts.MaxSessionsPerCaller, s.folders >= s.opts.MaxSessions
		if (mine || all) && !s.hasFolder(name) {
			if mine {
				return nil, nil, fmt.Errorf("you hold %d sessions' workspaces on this server, its limit for one caller: use a session you have, or try again once your idle ones have been removed", s.held[tag])
			}
			return nil, nil, fmt.Errorf("this server holds %d sessions' workspaces, its limit: try again once idle sessions have been removed", s.folders)
		}
		ws, err := s.openFolder(name)
		if err != nil {
			s.opts.Logger.Warn("cannot make a session's workspace", "folder", name, "error", err)
			return nil, nil, fmt.Errorf("cannot make the session's workspace: %v", err)
		}
		if tag != "" {
			s.note(name, tag) // the caller's, if no record said whose before
		}
		e = &session{ws: ws}
		s.open[name] = e
	}
	e.refs++
	s.use(name, e)
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
	s.use(filepath.Base(e.ws.dir), e)
	if s.closed && e.refs == 0 {
		e.ws.Close()
	}
}

// use records that the session of folder name is used now. Called with
// s.mu held.
func (s *Sessions) use(name string, e *session) {
	e.used = s.opts.Now()
	s.last[name] = e.used
	s.dirty = true
}

// openFolder makes (or finds) the session folder name and opens it. The
// folder must be a real folder, not a symlink: os.Root would follow a
// symlink to a sibling, so Lstat and SameFile pin the folder opened to the
// one found. With UIDs, the folder belongs to its session's uid. Called
// with s.mu held.
func (s *Sessions) openFolder(name string) (*Workspace, error) {
	made := false
	switch err := s.root.Mkdir(name, 0o700); {
	case err == nil:
		s.folders++
		made = true
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
	var owner *Owner
	if s.opts.UIDs != nil {
		if owner, err = s.own(name, found, made); err != nil {
			if made {
				_ = s.root.Remove(name)
				s.folders--
			}
			return nil, err
		}
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
	return &Workspace{root: r, dir: dir, real: dir, owner: owner, limits: s.opts.Limits}, nil
}

// own gives the folder name a uid of its own: the one it has, when that is
// in the range and no other folder's, else a free one (the search starts
// at a point the name picks, so names spread over the range), given to the
// folder and, for a folder that already held files, to all it holds.
// Called with s.mu held.
func (s *Sessions) own(name string, found fs.FileInfo, made bool) (*Owner, error) {
	r := *s.opts.UIDs
	if st, ok := found.Sys().(*syscall.Stat_t); ok && !made && st.Uid >= r.First && st.Uid <= r.Last {
		if other, taken := s.owners[st.Uid]; !taken || other == name {
			s.owners[st.Uid] = name
			return &Owner{UID: int(st.Uid), GID: int(st.Uid)}, nil
		}
	}
	size := uint64(r.Last-r.First) + 1
	sum := sha256.Sum256([]byte(name))
	start := (uint64(sum[0])<<24 | uint64(sum[1])<<16 | uint64(sum[2])<<8 | uint64(sum[3])) % size
	for i := range size {
		uid := r.First + uint32((start+i)%size)
		if _, taken := s.owners[uid]; taken {
			continue
		}
		o := &Owner{UID: int(uid), GID: int(uid)}
		if err := s.chownTree(name, o, made); err != nil {
			return nil, fmt.Errorf("giving the session's folder its uid %d: %w", uid, err)
		}
		s.owners[uid] = name
		return o, nil
	}
	return nil, fmt.Errorf("every uid of sandbox.uid_range (%d-%d) belongs to a session: try again once idle sessions have been removed", r.First, r.Last)
}

// chownTree gives the folder name (and, unless it is new, all it holds) to o.
func (s *Sessions) chownTree(name string, o *Owner, made bool) error {
	if made {
		return s.root.Chown(name, o.UID, o.GID)
	}
	return fs.WalkDir(s.root.FS(), name, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return s.root.Lchown(p, o.UID, o.GID)
	})
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

// forget closes an idle session's folder handle; its last use stays in
// the record. Called with s.mu held.
func (s *Sessions) forget(name string) {
	e := s.open[name]
	e.ws.Close()
	delete(s.open, name)
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
	for name := range s.last { // folders removed behind our back
		if _, err := s.root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			delete(s.last, name)
			s.disown(name)
			s.unnote(name)
			s.dirty = true
		}
	}
	s.save()
	s.mu.Unlock()
}

// disown frees the uid of folder name. Called with s.mu held.
func (s *Sessions) disown(name string) {
	for uid, n := range s.owners {
		if n == name {
			delete(s.owners, uid)
		}
	}
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
			s.mu.Unlock()
			return true
		}
		s.forget(name)
	} else {
		info, err := s.root.Lstat(name)
		if err != nil {
			s.mu.Unlock()
			return false
		}
		if s.owners != nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid >= s.opts.UIDs.First && st.Uid <= s.opts.UIDs.Last {
				if _, taken := s.owners[st.Uid]; !taken {
					s.owners[st.Uid] = name
				}
			}
		}
		last, ok := s.last[name]
		if !ok { // not in the record: counted as used when first seen
			s.last[name] = now
			s.dirty = true
		}
		if !ok || now.Sub(last) < s.opts.TTL {
			s.mu.Unlock()
			return true
		}
	}
	delete(s.last, name)
	s.disown(name)
	s.unnote(name)
	s.dirty = true
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
	s.save()
	return s.root.Close()
}
