package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	httpsource "github.com/toolwire/toolwire/sources/http"
	mcpsource "github.com/toolwire/toolwire/sources/mcp"
	"github.com/toolwire/toolwire/sources/remote"
	"github.com/toolwire/toolwire/tools"
)

// toolSource is one kind of tools the config file declares. On every
// reload each source prepares its part of the new config; only when all of
// them succeed are their apply functions called, so an invalid config
// changes nothing. http_tools is one; mcp_servers and remotes plug in the
// same way (see toolSources).
type toolSource interface {
	// Prepare checks the source's part of cfg and readies its tools without
	// changing what is served. The returned apply swaps them into the
	// registry (Registry.Update: the old ones out, the new ones in, one new
	// revision); an error from apply is logged and leaves the source's
	// previous tools served.
	Prepare(cfg serveConfig) (apply func() error, err error)
	// Close releases the source's resources when serve stops.
	Close()
}

// reloadable are the config keys a reload applies; a change to any other
// key is logged as needing a restart.
var reloadable = map[string]bool{"http_tools": true, "mcp_servers": true, "remotes": true}

// toolSources returns the sources of tools the config file declares.
// Sources that keep connections (MCP servers, remote mounts) run them until
// ctx is done or Close, and log to log.
func toolSources(ctx context.Context, reg *tools.Registry, log *slog.Logger) []toolSource {
	set := &sourceSet{mcp: mcpsource.New(reg, log), remotes: remote.New(reg, log)}
	return []toolSource{
		newHTTPSource(reg),
		syncSource{
			Check: func(cfg serveConfig) error { return cfg.Sources.validate() },
			Sync:  func(cfg serveConfig) error { return set.Apply(ctx, cfg.Sources) },
			Stop:  set.Close,
		},
	}
}

// syncSource adapts a source that checks and applies its part of the config
// in one step (a Sync method) to toolSource. Check, when set, runs in the
// prepare phase, so an invalid config stops the whole reload; Sync runs only
// once every source has prepared.
type syncSource struct {
	Check func(cfg serveConfig) error // optional
	Sync  func(cfg serveConfig) error
	Stop  func() // optional
}

// Prepare implements toolSource.
func (s syncSource) Prepare(cfg serveConfig) (func() error, error) {
	if s.Check != nil {
		if err := s.Check(cfg); err != nil {
			return nil, err
		}
	}
	return func() error { return s.Sync(cfg) }, nil
}

// Close implements toolSource.
func (s syncSource) Close() {
	if s.Stop != nil {
		s.Stop()
	}
}

// startReload applies the tools cfg declares and, when serve has a config
// file, keeps them in step with the file until ctx is done: the file is
// watched, and SIGHUP re-reads it. stop waits for the watcher and closes
// the sources.
func startReload(ctx context.Context, args []string, cfg serveConfig, reg *tools.Registry, log *slog.Logger) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	sources := toolSources(ctx, reg, log)
	closeAll := func() {
		for _, s := range sources {
			s.Close()
		}
	}
	r := &reloader{
		path: configPath(args),
		load: func() (serveConfig, error) {
			// Read as at start: the file, then the command line's flags.
			cfg, _, err := parseServeArgs(args, io.Discard)
			return cfg, err
		},
		sources:  sources,
		log:      log,
		debounce: 100 * time.Millisecond,
	}
	if err := r.start(cfg); err != nil {
		cancel()
		closeAll()
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
		closeAll()
	}, nil
}

// configPath returns the --config argument of serve's args, which have
// parsed without error already.
func configPath(args []string) string {
	var cfg serveConfig
	var path string
	fs := serveFlags(&cfg, &path)
	fs.SetOutput(io.Discard)
	_ = fs.Parse(args)
	return path
}

// reloader re-reads the config file and swaps in the tools it declares.
type reloader struct {
	path     string                      // the config file; "" when there is none
	load     func() (serveConfig, error) // reads the config as serve did
	sources  []toolSource
	log      *slog.Logger
	debounce time.Duration // quiet time after a file event before reading

	mu      sync.Mutex  // serialises reloads
	running serveConfig // the config serve started with
	last    serveConfig // the config last applied
	lastErr string      // the last rejection, logged once per distinct error
}

// start applies cfg, the config serve starts with.
func (r *reloader) start(cfg serveConfig) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = cfg
	if err := r.apply(cfg); err != nil {
		if r.path != "" {
			return fmt.Errorf("config %s: %w", r.path, err)
		}
		return err
	}
	r.last = cfg
	return nil
}

// Reload re-reads the config and applies its tools. Unless forced, a config
// equal to the last one applied is left alone, so file events that change
// nothing (an editor's swap file, a touch) cost a read and no log line.
func (r *reloader) Reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := r.load()
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
		r.log.Log(context.Background(), level, "config reload rejected; the previous tools are still served", "config", r.path, "error", err.Error())
		return err
	}
	r.lastErr = ""
	r.last = cfg
	// The line says what the new config declares. The registry is no
	// witness: MCP servers and remotes (dis)connect in the background, so
	// right now it may still list the tools of a server just removed;
	// their own lines say when their tools come and go.
	r.log.Info("config reloaded", "config", r.path, "http_tools", sourceNames(cfg.HTTPTools, func(s httpsource.Spec) string { return s.Name }),
		"mcp_servers", sourceNames(cfg.MCPServers, func(s mcpsource.ServerConfig) string { return s.Name }),
		"remotes", sourceNames(cfg.Remotes, func(s remote.Config) string { return s.Name }))
	if changed := restartOnly(r.running, cfg); len(changed) > 0 {
		r.log.Warn("config settings changed that need a restart to take effect", "config", r.path, "settings", changed)
	}
	return nil
}

// sourceNames returns the names of a config's sources, [] rather than null
// in the log when there are none.
func sourceNames[S any](specs []S, name func(S) string) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = name(s)
	}
	return names
}

// apply prepares every source for cfg and, when all succeed, applies them.
func (r *reloader) apply(cfg serveConfig) error {
	applies := make([]func() error, 0, len(r.sources))
	for _, s := range r.sources {
		apply, err := s.Prepare(cfg)
		if err != nil {
			return err
		}
		applies = append(applies, apply)
	}
	for _, apply := range applies {
		if err := apply(); err != nil {
			// Prepare checked what it could; a conflict that arose since
			// leaves this source's previous tools in place, and the others
			// swap theirs in.
			r.log.Error("config reload: a tool source could not be swapped in; its previous tools are still served", "config", r.path, "error", err.Error())
		}
	}
	return nil
}

// restartOnly returns the config keys, other than the reloadable ones, whose
// values differ between a and b. The structs embedded in serveConfig are
// walked: their keys sit at the top level of the file.
func restartOnly(a, b serveConfig) []string {
	var changed []string
	var walk func(va, vb reflect.Value)
	walk = func(va, vb reflect.Value) {
		for i := range va.NumField() {
			f := va.Type().Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case f.Anonymous && key == "" && f.Type.Kind() == reflect.Struct:
				walk(va.Field(i), vb.Field(i))
			case reloadable[key] || key == "-":
			case !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()):
				changed = append(changed, key)
			}
		}
	}
	walk(reflect.ValueOf(a), reflect.ValueOf(b))
	return changed
}

// openWatcher starts watching the config file, or returns nil when there
// is none or it cannot be watched. It runs before run, so no change made
// after serve started is missed.
func (r *reloader) openWatcher() *fsnotify.Watcher {
	if r.path == "" {
		return nil
	}
	w, err := r.watch()
	if err != nil {
		r.log.Warn("cannot watch the config file; SIGHUP still re-reads it", "config", r.path, "error", err.Error())
		return nil
	}
	return w
}

// run reloads on SIGHUP and on the events of w (which may be nil), until
// ctx is done; then it closes w.
func (r *reloader) run(ctx context.Context, w *fsnotify.Watcher, hup <-chan os.Signal) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if r.path == "" {
				r.log.Warn("SIGHUP: serve has no --config file to re-read")
				continue
			}
			r.log.Info("SIGHUP: re-reading the config file", "config", r.path)
			_ = r.Reload(true)
		case ev := <-events:
			// Any change in the directory may be the file's: editors rename
			// a new file into place, and Kubernetes swaps the ..data symlink
			// a ConfigMap's files point through. Reload reads the file and
			// ignores events that changed nothing.
			if ev.Op != fsnotify.Chmod {
				timer.Reset(r.debounce)
			}
		case err := <-errs:
			r.log.Warn("watching the config file", "config", r.path, "error", err.Error())
		case <-timer.C:
			_ = r.Reload(false)
		}
	}
}

// watch watches the config file's directory, and the directory its
// symlink points into when that is another one.
func (r *reloader) watch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	dirs := []string{filepath.Dir(r.path)}
	if real, err := filepath.EvalSymlinks(r.path); err == nil && !slices.Contains(dirs, filepath.Dir(real)) {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// httpSource serves the config's http_tools.
type httpSource struct {
	reg    *tools.Registry
	client *http.Client // shared by every generation of HTTP tools
}

func newHTTPSource(reg *tools.Registry) *httpSource {
	return &httpSource{reg: reg, client: httpsource.NewClient()}
}

// Prepare implements toolSource.
func (s *httpSource) Prepare(cfg serveConfig) (func() error, error) {
	ts, err := httpsource.Tools(cfg.HTTPTools, s.client)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if owner, taken := s.reg.Owner(t.Name); taken && owner != "http" {
			return nil, fmt.Errorf("http_tools: tool %q: the name is taken by another tool", t.Name)
		}
	}
	return func() error {
		_, err := s.reg.Source("http").Set(ts...)
		return err
	}, nil
}

// Close implements toolSource.
func (s *httpSource) Close() { s.client.CloseIdleConnections() }
