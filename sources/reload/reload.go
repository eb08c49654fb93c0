// Package reload keeps a server's tool sources in step with its config
// file: the file is watched (editors' renames and Kubernetes ConfigMap
// symlink swaps included) and SIGHUP re-reads it. Each new config is
// checked by every source (and Options.Check) before any applies it, so an
// invalid file changes nothing; the other settings that changed are
// reported as needing a restart, since only the sources (and what
// Options.Apply applies) are reloaded.
//
// reload knows the config file only through Options: reading and
// comparing the whole config is the binary's. It must not import gRPC,
// service/ or cmd/.
package reload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/toolwire/toolwire/sources"
)

// Options say how to read a config of type C, the binary's whole
// configuration, and what of it reload applies.
type Options[C any] struct {
	// Path is the config file; "" when there is none: then the sources
	// get the config serve started with and nothing is watched.
	Path string
	// Load reads the config as serve did at start.
	Load func() (C, error)
	// Sources is the part of a config the sources apply.
	Sources func(C) sources.Config
	// Check and Apply, when set, reload the settings outside the sources
	// that are live too (the policies): Check is asked with the sources'
	// Check, so an invalid file changes nothing; Apply runs after the
	// sources are synced.
	Check func(C) error
	Apply func(C)
	// RestartOnly names the settings outside Sources whose values differ
	// between started and now; a reload logs them as needing a restart.
	RestartOnly func(started, now C) []string
	// Outcome, when set, is told how each reload of the file ended: nil
	// when what the file says is in force (applied, or unchanged), the
	// reason otherwise (the previous config still served). It is called
	// with reloads serialised.
	Outcome func(err error)
	// Log receives reload's lines; nil discards.
	Log *slog.Logger
	// Debounce is the quiet time after a file event before the file is
	// read (default 100ms): editors write a file in several steps.
	Debounce time.Duration
}

// Start applies cfg, the config serve starts with, to src and, when there
// is a config file, keeps src in step with the file until ctx is done.
// An invalid cfg is an error naming the file, and src is closed. stop
// waits for the watcher and closes src.
func Start[C any](ctx context.Context, src sources.Source[sources.Config], cfg C, opts Options[C]) (stop func(), err error) {
	r := newReloader(src, opts)
	ctx, cancel := context.WithCancel(ctx)
	if err := r.start(ctx, cfg); err != nil {
		cancel()
		_ = src.Close()
		return nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	w := r.openWatcher()
	wg.Go(func() { r.run(ctx, w, hup) })
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
		_ = src.Close()
	}, nil
}

// reloader re-reads the config file and swaps in the tools it declares.
type reloader[C any] struct {
	Options[C]
	src sources.Source[sources.Config]
	ctx context.Context // the sources' Sync context; set by start

	mu      sync.Mutex // serialises reloads
	running C          // the config serve started with
	last    C          // the config last applied
	lastErr string     // the last rejection, logged once per distinct error

	w    *fsnotify.Watcher // nil when nothing is watched
	docs map[string]bool   // the sources' own files (sources.Filer), cleaned absolute paths
}

func newReloader[C any](src sources.Source[sources.Config], opts Options[C]) *reloader[C] {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce == 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	return &reloader[C]{Options: opts, src: src}
}

// start applies cfg, the config serve starts with.
func (r *reloader[C]) start(ctx context.Context, cfg C) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx = ctx
	r.running = cfg
	if err := r.apply(cfg); err != nil {
		if r.Path != "" {
			return fmt.Errorf("config %s: %w", r.Path, err)
		}
		return err
	}
	r.last = cfg
	r.setDocs(cfg)
	return nil
}

// Reload re-reads the config and applies its sources. Unless forced, a
// config equal to the last one applied is left alone, so file events that
// change nothing (an editor's swap file, a touch) cost a read and no log
// line.
func (r *reloader[C]) Reload(force bool) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Outcome != nil {
		defer func() { r.Outcome(err) }()
	}
	r.rewatch()
	cfg, err := r.Load()
	if err == nil {
		if !force && reflect.DeepEqual(cfg, r.last) {
			r.lastErr = ""
			return nil
		}
		err = r.apply(cfg)
	}
	if err != nil {
		level := slog.LevelError
		if !force && err.Error() == r.lastErr {
			level = slog.LevelDebug
		}
		r.lastErr = err.Error()
		r.Log.Log(context.Background(), level, "config reload rejected; the previous tools are still served", "config", r.Path, "error", err.Error())
		return err
	}
	r.lastErr = ""
	r.last = cfg
	r.setDocs(cfg)
	// The line says what the new config declares. The registry is no
	// witness: MCP servers and remotes (dis)connect in the background, so
	// right now it may still list the tools of a server just removed;
	// their own lines say when their tools come and go.
	r.Log.Info("config reloaded", append([]any{"config", r.Path}, r.Sources(cfg).LogAttrs()...)...)
	if changed := r.RestartOnly(r.running, cfg); len(changed) > 0 {
		r.Log.Warn("config settings changed that need a restart to take effect", "config", r.Path, "settings", changed)
	}
	return nil
}

// apply checks cfg's sources and, when they pass, syncs them. r.mu is held.
func (r *reloader[C]) apply(cfg C) error {
	sc := r.Sources(cfg)
	if err := r.src.Check(r.ctx, sc); err != nil {
		return err
	}
	if r.Check != nil {
		if err := r.Check(cfg); err != nil {
			return err
		}
	}
	if err := r.src.Sync(r.ctx, sc); err != nil {
		// Check passed what it could; a source that failed since keeps
		// its previous tools, and the others swap theirs in.
		r.Log.Error("config reload: a tool source could not be swapped in; its previous tools are still served", "config", r.Path, "error", err.Error())
	}
	if r.Apply != nil {
		r.Apply(cfg)
	}
	return nil
}

// setDocs records the files cfg's sources read besides the config file
// (OpenAPI documents), and watches their directories. r.mu is held.
func (r *reloader[C]) setDocs(cfg C) {
	r.docs = map[string]bool{}
	for _, f := range r.Sources(cfg).Files() {
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		r.docs[abs] = true
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			r.docs[real] = true
		}
	}
	r.watchDocs()
}

// watchDocs adds the documents' directories to the watcher; a directory
// watched already is no harm. r.mu is held.
func (r *reloader[C]) watchDocs() {
	if r.w == nil {
		return
	}
	for doc := range r.docs {
		if err := r.w.Add(filepath.Dir(doc)); err != nil {
			r.Log.Warn("cannot watch a file the config names; SIGHUP still re-reads it", "file", doc, "error", err.Error())
		}
	}
}

// isDoc reports whether a file event is about one of the documents: the
// file itself, or a Kubernetes ..data swap in its directory.
func (r *reloader[C]) isDoc(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Events name files as the watch was added: relative when the config
	// path is.
	if abs, err := filepath.Abs(name); err == nil {
		name = abs
	}
	for doc := range r.docs {
		if name == doc || (filepath.Base(name) == "..data" && filepath.Dir(name) == filepath.Dir(doc)) {
			return true
		}
	}
	return false
}

// openWatcher starts watching the config file, or returns nil when there
// is none or it cannot be watched. It runs before run, so no change made
// after serve started is missed.
func (r *reloader[C]) openWatcher() *fsnotify.Watcher {
	if r.Path == "" {
		return nil
	}
	w, err := r.watch()
	if err != nil {
		r.Log.Warn("cannot watch the config file; SIGHUP still re-reads it", "config", r.Path, "error", err.Error())
		return nil
	}
	r.mu.Lock()
	r.w = w
	r.watchDocs()
	r.mu.Unlock()
	return w
}

// run reloads on SIGHUP and on the events of w (which may be nil), until
// ctx is done; then it closes w. Events are the config file's directory's
// and those of the directories of the files its sources read (OpenAPI
// documents): a change to one of those forces the reload.
func (r *reloader[C]) run(ctx context.Context, w *fsnotify.Watcher, hup <-chan os.Signal) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	docChanged := false // an event since the last reload was a document's
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if r.Path == "" {
				r.Log.Warn("SIGHUP: serve has no --config file to re-read")
				continue
			}
			r.Log.Info("SIGHUP: re-reading the config file", "config", r.Path)
			_ = r.Reload(true)
		case ev := <-events:
			// Any change in the directory may be the file's: editors rename
			// a new file into place, and Kubernetes swaps the ..data symlink
			// a ConfigMap's files point through. Reload reads the file and
			// ignores events that changed nothing.
			if ev.Op != fsnotify.Chmod {
				// A document's change leaves the config as it was, so
				// the reload is forced: the sources read it again.
				docChanged = docChanged || r.isDoc(ev.Name)
				timer.Reset(r.Debounce)
			}
		case err := <-errs:
			r.Log.Warn("watching the config file", "config", r.Path, "error", err.Error())
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were dropped, a document's change perhaps among
				// them: read everything again.
				docChanged = true
				timer.Reset(r.Debounce)
			}
		case <-timer.C:
			_ = r.Reload(docChanged)
			docChanged = false
		}
	}
}

// watch watches the directories configDirs names.
func (r *reloader[C]) watch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, d := range configDirs(r.Path) {
		if err := w.Add(d); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// rewatch adds the directories configDirs names now: a link on the way to
// the file may point elsewhere since the last look (a Kubernetes ..data
// swap makes a new directory the file's). A directory watched already is
// no harm. r.mu is held.
func (r *reloader[C]) rewatch() {
	if r.w == nil {
		return
	}
	for _, d := range configDirs(r.Path) {
		if err := r.w.Add(d); err != nil {
			r.Log.Debug("cannot watch a directory on the way to the config file", "dir", d, "error", err.Error())
		}
	}
}

// configDirs returns the directories where a change can change what path
// reads: its own, that of each symbolic link it is reached through (where
// the link is replaced: a link to a ConfigMap's file, ..data beside that
// file), and that of the file it resolves to (where the file is edited).
func configDirs(path string) []string {
	dirs := []string{filepath.Dir(path)}
	add := func(d string) {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	p := path
	for range maxLinks {
		target, err := os.Readlink(p)
		if err != nil {
			break // not a link, or gone
		}
		add(filepath.Dir(p))
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		add(filepath.Dir(real))
	}
	return dirs
}

// maxLinks bounds the links configDirs follows, as the kernel's own bound
// (40) does a path's.
const maxLinks = 40
