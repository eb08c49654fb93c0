package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolwire/toolwire/audit"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"github.com/toolwire/toolwire/service/serverstatus"
	"github.com/toolwire/toolwire/sources"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"github.com/toolwire/toolwire/tools/workspacetools"
	"google.golang.org/grpc"
)

// runServe serves until ctx is done, then drains and returns nil, in five
// steps: parse the configuration, build the tools, build the engine over
// them, build the surfaces over the engine (each listening, so a port in
// use fails serve before anything is served), and serve them all.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := parseServe(args, stderr)
	if s == nil || err != nil {
		return relativeHint(args, err) // or -h
	}
	defer s.close()
	if err := s.buildTools(ctx, args); err != nil {
		return s.startFailed(ctx, relativeHint(args, err))
	}
	if err := s.buildEngine(ctx); err != nil {
		return s.startFailed(ctx, relativeHint(args, err))
	}
	ls, err := s.buildSurfaces()
	if err != nil {
		return relativeHint(args, fmt.Errorf("serve: %w", err))
	}
	return s.serve(ctx, ls)
}

// relativeHint adds to err, a file of a relative path not found at
// start, where relative paths are looked for when the config file is in
// another directory:
// "auth.tokens_file tokens: stat tokens: no such file or directory" did not
// say that tokens beside /etc/toolwire/toolwire.yaml is looked for in the
// directory serve runs in.
func relativeHint(args []string, err error) error {
	path := configPath(args)
	var pe *fs.PathError
	if path == "" || !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || filepath.IsAbs(pe.Path) {
		return err
	}
	wd, wdErr := os.Getwd()
	dir, absErr := filepath.Abs(filepath.Dir(path))
	if wdErr != nil || absErr != nil || dir == wd {
		return err
	}
	return fmt.Errorf("%w (a relative path in %s is relative to the directory serve runs in, %s, not to the file's, %s)", err, path, wd, dir)
}

// startFailed returns the error of a step that failed while serve
// started, unless a signal (SIGTERM, SIGINT) asked it to stop meanwhile:
// then what failed was the work the signal cut short (an OpenAPI document
// still being fetched, a store still being dialled), which is no fault of
// the configuration, and the stop asked for is no failure. It said
// "toolwire: config toolwire.yaml: openapi "x": spec …: terminated signal
// received" and exited 1.
func (s *serveRun) startFailed(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	s.log.Info("stopped while starting, before serving: a signal asked it to", "cut_short", err.Error())
	return nil
}

// serveRun is what runServe's steps build, in order, and what it closes,
// last first, once the listeners have drained.
type serveRun struct {
	cfg      serveConfig
	log      *slog.Logger
	tel      *telemetry
	policies *policy.Live // the policies in force, swapped by reloads
	reg      *tools.Registry
	srcs     *sources.Set
	eng      *engine.Engine
	closers  []func()
}

// onClose has close call f; closers run last first.
func (s *serveRun) onClose(f func()) { s.closers = append(s.closers, f) }

// close closes what the steps built, last first.
func (s *serveRun) close() {
	for _, f := range slices.Backward(s.closers) {
		f()
	}
}

// shutdownBound is the longest serve's shutdown lasts with cfg, from the
// signal to its exit: the gRPC surface's drain (the engine's, then gRPC's
// graceful stop) or the HTTP port's, whichever is longer, as both run at
// once; the admin listener's (adminDrain), which stops after them; then
// the closers, last first: the held idempotency records' last attempt,
// the audit trail's flush, the sources' stop (within closeMargin) and
// telemetry's flush (flushTimeout). A pod's terminationGracePeriodSeconds
// must exceed it plus the preStop delay, or the kubelet's SIGKILL may cut
// the audit trail's flush short; serve logs it at start.
func shutdownBound(cfg serveConfig) time.Duration {
	drain := max(cfg.EngineConfig.DrainBound()+grpcserve.StopGrace, cfg.HTTPConfig.DrainBound())
	if cfg.AdminListen != "" {
		drain += adminDrain
	}
	return drain + closeMargin + flushTimeout
}

// closeMargin is what shutdownBound allows the closers but telemetry's:
// a held record's last attempt takes at most a second when the store does
// not answer (the rest are not tried), a stdio MCP server has 2 s to exit
// once its stdin is closed and 2 s more after SIGTERM, and the trail's
// flush is waited for audit.CloseWait (5 s) at most, should its output
// not take writes (an unread pipe, a hung filesystem).
const closeMargin = 10 * time.Second

// parseServe reads the command line and the config file, and refuses,
// before anything starts, settings that cannot work (a malformed --store,
// engine settings that contradict each other, a policy that cannot run);
// Open, later, finds what only connecting can. It returns nil after -h.
func parseServe(args []string, stderr io.Writer) (*serveRun, error) {
	cfg, help, err := parseServeArgs(args, stderr)
	if help || err != nil {
		return nil, err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return nil, cmdUsageError("serve", "serve: %v", err)
	}
	routeLibraryLogs(log)
	if err := cfg.StoreConfig.Validate(); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	// Policies are compiled here, to refuse a rule that cannot run before
	// anything starts, and again by each reload.
	for _, check := range []func() error{cfg.checkNegative, cfg.EngineConfig.Validate, cfg.PolicyConfig.Check, cfg.WorkspaceConfig.Validate, cfg.AdminConfig.Validate} {
		if err := check(); err != nil {
			return nil, cmdUsageError("serve", "serve: %v", err)
		}
	}
	return &serveRun{cfg: cfg, log: log, policies: &policy.Live{}}, nil
}

// buildTools starts the telemetry (the sandbox's gauge goes on it), then
// fills the registry: the diagnostic tools, the workspace tools, then the
// sources, last so that built-in tools keep their names.
func (s *serveRun) buildTools(ctx context.Context, args []string) (err error) {
	if s.tel, err = startTelemetry(ctx, s.cfg.AdminListen, s.log); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.onClose(s.tel.shutdown)
	if s.reg, err = tools.NewRegistry(); err != nil {
		return err
	}
	if s.cfg.Diag {
		if err := s.reg.Add(diag.Tools()...); err != nil {
			return err
		}
	}
	ws, err := workspacetools.Open(s.cfg.WorkspaceConfig, workspacetools.Env{SessionTTL: s.cfg.SessionTTL, MeterProvider: s.tel.meterProvider(), Logger: s.log})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.onClose(func() { _ = ws.Close() })
	if err := s.reg.Add(ws.Tools()...); err != nil {
		return err
	}
	s.srcs = sources.New(s.reg, s.log)
	stopSources, err := startSources(ctx, args, s.cfg, s.srcs, s.policies, s.tel.meterProvider(), s.log)
	if err != nil {
		return err
	}
	s.onClose(stopSources)
	s.warnOfTools()
	return nil
}

// warnOfTools warns of an empty registry and of safe overrides naming no
// tool, and logs what is served.
func (s *serveRun) warnOfTools() {
	snap := s.reg.Snapshot()
	if snap.Len() == 0 && s.cfg.Sources.Empty() {
		s.log.Warn("no tools are registered: ListTools returns none and every call gets an UNKNOWN_TOOL result; use --diag for the diagnostic tools")
	}
	for name := range s.cfg.Safe {
		if _, ok := snap.Lookup(name); !ok {
			s.log.Warn("safe override names a tool that is not registered", "tool", name)
		}
	}
	s.warnOfPatterns(snap.Names())
}

// warnOfPatterns warns of each tool pattern of the permissions and the
// approval rules that matches none of names, the tools registered at
// start, nor could match a tool of a server that connects later (its
// tools start with its name and "_"): a misspelt allow pattern hid a
// tool, a misspelt deny pattern (deny: [run_comand]) let it through, and
// a misspelt approval rule held nothing, each without a word.
func (s *serveRun) warnOfPatterns(names []string) {
	var later []string
	for _, c := range s.cfg.MCPServers {
		later = append(later, c.Name+"_")
	}
	for _, c := range s.cfg.Remotes {
		later = append(later, c.Name+"_")
	}
	for _, c := range s.cfg.GRPC {
		later = append(later, c.Name+"_")
	}
	check := func(key string, pats []string) {
		for _, pat := range pats {
			lit := pat // the part before its first wildcard
			if i := strings.IndexAny(pat, `*?[\`); i >= 0 {
				lit = pat[:i]
			}
			if lit == "" || slices.ContainsFunc(names, func(n string) bool { ok, _ := path.Match(pat, n); return ok }) ||
				slices.ContainsFunc(later, func(p string) bool { return strings.HasPrefix(lit, p) || strings.HasPrefix(p, lit) }) {
				continue
			}
			s.log.Warn(key+" pattern matches no tool", "pattern", pat)
		}
	}
	perms := s.cfg.SecurityConfig.Auth.Permissions
	for _, caller := range slices.Sorted(maps.Keys(perms)) {
		check("auth.permissions."+caller+".allow", perms[caller].Allow)
		check("auth.permissions."+caller+".deny", perms[caller].Deny)
	}
	for i, r := range s.cfg.PolicyConfig.Approvals {
		check(fmt.Sprintf("approvals[%d].tools", i), r.Tools)
	}
}

// leaseWarnings warns of each lease of cfg that a failover of the
// store's Redis Cluster (failover long, 0: not known) outlasts: while a
// master's replica waits to be promoted no lease in its slots can be
// renewed, and on the promoted replica it has run out, so that a resend
// to another replica runs a keyed call in flight again, and a reader on
// another replica ends a running detached batch as lost.
func leaseWarnings(cfg engine.Config, failover time.Duration) []string {
	if failover <= 0 {
		return nil
	}
	idem, batch := cfg.Leases()
	var out []string
	for _, l := range []struct {
		name  string
		lease time.Duration
		risk  string
	}{
		{"idempotency_lease", idem, "a keyed call running when its record's master fails is run again by a resend to another replica"},
		{"batch_lease", batch, "a detached batch running when its log's master fails is ended as lost (its calls CANCELLED) by a reader on another replica"},
	} {
		if l.lease <= failover {
			out = append(out, fmt.Sprintf("%s (%s) is not longer than the Redis Cluster's failover (cluster-node-timeout and the election, at least %s): the lease runs out before a replica is promoted, so %s; raise %s above %s or lower cluster-node-timeout",
				l.name, l.lease, failover, l.risk, l.name, failover))
		}
	}
	return out
}

// buildEngine opens the store and the audit trail and makes the engine
// over them, with the admission and the observers chosen here. The store
// and the trail close after the engine has drained (closers run last
// first), so the calls that end in the drain are kept and recorded.
func (s *serveRun) buildEngine(ctx context.Context) error {
	rules, err := s.cfg.admission(s.policies)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	deps := engine.Deps{Logger: s.log, Admission: rules, Observer: s.tel.observer(s.cfg.TraceContent, s.cfg.AuditConfig.Redact)}
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := s.cfg.StoreConfig.Open(openCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.onClose(func() { st.Close() })
	// One store keeps the idempotency records, the variables and the logs.
	deps.Idempotency, deps.Vars, deps.EventLog = st, st, st
	s.log.Info("idempotency and session store", "store", s.cfg.StoreConfig.Kind())
	// What the store found that breaks promises (a Redis that evicts).
	if w, ok := st.(interface{ Warnings() []string }); ok {
		for _, msg := range w.Warnings() {
			s.log.Warn(msg, "store", s.cfg.StoreConfig.Kind())
		}
	}
	if f, ok := st.(interface{ FailoverTime() time.Duration }); ok {
		for _, msg := range leaseWarnings(s.cfg.EngineConfig, f.FailoverTime()) {
			s.log.Warn(msg, "store", s.cfg.StoreConfig.Kind())
		}
	}
	if err := instrumentStore(s.tel.meterProvider(), st); err != nil {
		s.log.Warn("the store's metric could not be registered", "error", err.Error())
	}
	if s.cfg.RatePerCaller > 0 {
		// A store every replica shares keeps the allowances too (Redis);
		// otherwise each replica keeps its own.
		rs, shared := st.(engine.RateStore)
		if shared {
			deps.RateStore = rs
		}
		s.log.Info("rate limit per caller", "rate_per_caller", s.cfg.RatePerCaller, "rate_burst", s.cfg.RateBurst, "shared", shared)
	}
	trail, err := audit.Open(s.cfg.AuditConfig, s.log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.onClose(func() { trail.Close() })
	s.audit(trail, rules, &deps)
	s.eng = engine.New(s.cfg.EngineConfig, deps)
	s.onClose(s.eng.Close)
	return nil
}

// audit puts the trail, when configured, among the engine's observers and,
// when required, in front of its admission.
func (s *serveRun) audit(trail *audit.Trail, rules *policy.Rules, deps *engine.Deps) {
	if trail == nil {
		return
	}
	deps.Observer = engine.Observers(deps.Observer, trail)
	if err := trail.Instrument(s.tel.meterProvider()); err != nil {
		s.log.Warn("the audit trail's metric could not be registered", "error", err.Error())
	}
	if s.cfg.AuditConfig.Required {
		deps.Admission = audit.Gate{Trail: trail, Next: rules}
	}
	s.log.Info("audit trail", "audit_log", s.cfg.AuditConfig.Log, "arguments", s.cfg.AuditConfig.Arguments, "required", s.cfg.AuditConfig.Required)
}

// buildSurfaces puts the surfaces on the engine, behind the one Verifier
// the security settings make, and listens for each: the health listener,
// the HTTP port, the gRPC port and the admin listener.
func (s *serveRun) buildSurfaces() ([]listener, error) {
	verifier, opts, err := serveSecurity(s.cfg.SecurityConfig, s.log, os.Getenv)
	if err != nil {
		return nil, err
	}
	// The callers other features name, as auth's own sections are checked:
	// "approvers: [alcie]" let no one approve, without a word.
	verifier.WarnUnnamed(s.log, "approvers", s.cfg.Approvers)
	for i, r := range s.cfg.PolicyConfig.Approvals {
		verifier.WarnUnnamed(s.log, fmt.Sprintf("approvals[%d].callers", i), r.Callers)
	}
	snap := s.reg.Snapshot()
	s.log.Info("serving tools", append(toolNames(snap.Names()), "revision", snap.Revision())...)
	svcCfg := s.cfg.ServiceConfig
	s.tel.apply(&svcCfg)
	// The read-only server view (AdminService), on both ports.
	view := serverstatus.New(s.eng, s.reg, serverstatus.Config{Sources: sourceStatus(s.srcs), Open: !verifier.Enabled()})
	svcCfg.Admin = view
	// Credentials are decided as each stream opens, before its request
	// is read, then by the interceptors (opts) where that would wait.
	svcCfg.Admit = grpcauth.Admit(verifier, s.log)
	srv, err := grpcserve.New(s.eng, s.reg, svcCfg)
	if err != nil {
		panic(err)
	}
	var ls []listener
	add := func(l listener, err error) error {
		if err == nil && l.srv != nil {
			ls = append(ls, l)
			s.onClose(func() { l.lis.Close() }) // unless served, which closes it
		}
		return err
	}
	if err := add(s.healthListener(srv)); err != nil {
		return nil, err
	}
	if err := add(s.httpPort(view, verifier, svcCfg)); err != nil {
		return nil, err
	}
	if err := add(s.grpcPort(srv, opts, verifier.Enabled())); err != nil {
		return nil, err
	}
	return ls, add(s.adminListener())
}

// serveSecurity reads the security settings into the one Verifier that
// checks the credentials of every surface, and the gRPC surface's options
// over it: its TLS and its interceptors.
func serveSecurity(cfg SecurityConfig, log *slog.Logger, getenv func(string) string) (*auth.Verifier, []grpc.ServerOption, error) {
	v, err := cfg.Verifier(log, getenv)
	if err != nil {
		return nil, nil, err
	}
	opts, err := grpcauth.ServerOptions(cfg, v, log)
	if err != nil {
		return nil, nil, err
	}
	return v, opts, nil
}

// grpcPort listens on the gRPC surface's address (listen). It refuses to
// listen beyond loopback with authentication off unless
// allow_unauthenticated (grpcserve.Config.CheckExposure).
func (s *serveRun) grpcPort(srv *grpcserve.Server, opts []grpc.ServerOption, authenticated bool) (listener, error) {
	addr := s.cfg.ServiceConfig.Listen
	if addr == "" {
		addr = grpcserve.DefaultListen
	}
	lis, err := listenTCP("listen", addr)
	if err != nil {
		return listener{}, err
	}
	if err := s.cfg.ServiceConfig.CheckExposure(lis.Addr(), authenticated); err != nil {
		lis.Close()
		return listener{}, err
	}
	if !authenticated && !isLoopback(lis.Addr().String()) {
		s.log.Warn("the gRPC port listens beyond loopback with authentication off (allow_unauthenticated): anyone who reaches it may call every tool", "addr", lis.Addr().String())
	}
	s.log.Info("toolwire listening on "+lis.Addr().String(), "addr", lis.Addr().String())
	return listener{lis: lis, srv: grpcServer{srv, opts}}, nil
}

// loggedToolNames is the most tool names one log line lists: a catalog of
// thousands would make the line megabytes long; `toolwire tools` lists them.
const loggedToolNames = 100

// toolNames are the log attributes naming names: how many, the first
// loggedToolNames of them, and how many the line leaves out.
func toolNames(names []string) []any {
	attrs := []any{"count", len(names)}
	if len(names) <= loggedToolNames {
		return append(attrs, "tools", names)
	}
	return append(attrs, "tools", names[:loggedToolNames], "more", len(names)-loggedToolNames)
}
