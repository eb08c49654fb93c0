package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/toolwire/toolwire/audit"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/connectserve"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/serverstatus"
	"github.com/toolwire/toolwire/service"
	grpcauth "github.com/toolwire/toolwire/service/auth"
	"github.com/toolwire/toolwire/sources"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
)

// runServe serves until ctx is done, then drains and returns nil.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, help, err := parseServeArgs(args, stderr)
	if help || err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return cmdUsageError("serve", "serve: %v", err)
	}
	routeLibraryLogs(log)
	// A malformed --store, or engine settings that cannot work together,
	// are refused before anything starts; Open, later, finds what only
	// connecting can.
	if err := cfg.StoreConfig.Validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := cfg.EngineConfig.Validate(); err != nil {
		return cmdUsageError("serve", "serve: %v", err)
	}
	// Policies are compiled once here, to refuse a rule that cannot run
	// before anything starts, and again by each reload.
	if err := cfg.PolicyConfig.Check(); err != nil {
		return cmdUsageError("serve", "serve: %v", err)
	}
	policies := &policy.Live{}
	tel, err := startTelemetry(ctx, cfg.AdminListen, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer tel.shutdown()

	reg, err := tools.NewRegistry()
	if err != nil {
		return err
	}
	if cfg.Diag {
		if err := reg.Add(diag.Tools()...); err != nil {
			return err
		}
	}
	closeWorkspace, err := addWorkspaceTools(reg, cfg.WorkspaceConfig, cfg.SessionTTL, tel.meterProvider(), log)
	if err != nil {
		return err
	}
	defer closeWorkspace()
	// Sources come last: built-in tools keep their names.
	srcs := sources.New(reg, log)
	stopSources, err := startSources(ctx, args, cfg, srcs, policies, log)
	if err != nil {
		return err
	}
	defer stopSources()
	if reg.Snapshot().Len() == 0 && cfg.Sources.Empty() {
		log.Warn("no tools are registered: ListTools returns none and every call gets an UNKNOWN_TOOL result; use --diag for the diagnostic tools")
	}
	for name := range cfg.Safe {
		if _, ok := reg.Snapshot().Lookup(name); !ok {
			log.Warn("safe override names a tool that is not registered", "tool", name)
		}
	}

	verifier, opts, err := serveSecurity(cfg.SecurityConfig, log, os.Getenv)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("serving tools", "tools", reg.Snapshot().Names(), "revision", reg.Snapshot().Revision())
	engCfg, deps := cfg.EngineConfig, engine.Deps{Logger: log}
	rules, err := cfg.admission(policies)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := cfg.StoreConfig.Open(openCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer st.Close() // after the server has drained
	// One store keeps both the idempotency records and the sessions.
	deps.Idempotency, deps.Vars, deps.EventLog = st, st, st
	log.Info("idempotency and session store", "store", cfg.StoreConfig.Kind())
	if engCfg.RatePerCaller > 0 {
		// A store every replica shares keeps the allowances too (Redis);
		// otherwise each replica keeps its own.
		shared := false
		if rs, ok := st.(engine.RateStore); ok {
			deps.RateStore, shared = rs, true
		}
		log.Info("rate limit per caller", "rate_per_caller", engCfg.RatePerCaller, "rate_burst", engCfg.RateBurst, "shared", shared)
	}
	// The engine is made here, with the telemetry chosen here, and the gRPC
	// surface put on it; a later surface shares it, and the Verifier.
	// The audit trail is closed after the engine has drained (defers run
	// last first), so the calls that end in the drain are recorded.
	trail, err := audit.Open(cfg.AuditConfig, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer trail.Close()
	deps.Observer = tel.observer(cfg.TraceContent)
	deps.Admission = rules
	if trail != nil {
		deps.Observer = engine.Observers(deps.Observer, trail)
		if err := trail.Instrument(tel.meterProvider()); err != nil {
			log.Warn("the audit trail's metric could not be registered", "error", err.Error())
		}
		if cfg.AuditConfig.Required {
			deps.Admission = audit.Gate{Trail: trail, Next: rules}
		}
		log.Info("audit trail", "audit_log", cfg.AuditConfig.Log, "arguments", cfg.AuditConfig.Arguments, "required", cfg.AuditConfig.Required)
	}
	eng := engine.New(engCfg, deps)
	defer eng.Close() // after the surfaces have drained
	svcCfg := cfg.ServiceConfig
	tel.apply(&svcCfg)
	// The read-only server view (AdminService), on both ports.
	view := serverstatus.New(eng, reg, serverstatus.Config{Sources: sourceStatus(srcs), Open: !verifier.Enabled()})
	svcCfg.Admin = view
	srv := service.New(eng, reg, svcCfg)
	if cfg.Health != "" {
		stopHealth, err := serveHealth(srv, cfg.Health, log)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer stopHealth() // after the drain, so probes see it
	}
	ctx, stopServing := context.WithCancelCause(ctx)
	defer stopServing(nil)
	httpTel := connectserve.Options{TracerProvider: svcCfg.TracerProvider, MeterProvider: svcCfg.MeterProvider}
	waitHTTP, err := serveHTTPPort(ctx, stopServing, cfg, eng, reg, view, verifier, httpTel, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	stopLog := context.AfterFunc(ctx, func() {
		log.Info("shutting down: draining running batches")
	})
	defer stopLog()
	err = srv.ListenAndServe(ctx, opts...)
	stopServing(nil)
	if err := errors.Join(err, waitHTTP()); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("toolwire stopped", "abandoned_tools", eng.Stats().Abandoned)
	return nil
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
