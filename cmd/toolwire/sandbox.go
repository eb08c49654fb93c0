package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
)

// startSandbox checks the sandbox configuration against the kernel and logs,
// once, what is and is not enforced; in required mode a missing restriction
// stops the server. What is enforced is published on mp (none when nil). A
// nil Sandbox means mode off.
func startSandbox(cfg sandbox.Config, mp metric.MeterProvider, log *slog.Logger) (*sandbox.Sandbox, error) {
	sb, r, err := sandbox.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	switch {
	case r.Mode == sandbox.Off:
		log.Warn("sandbox off: run_command runs commands with the server's full rights (UNSAFE)", "sandbox", r.String())
	case len(r.Missing) > 0:
		log.Warn("sandbox: run_command's commands run with what this kernel enforces", "sandbox", r.String(), "restrictions", r)
	case len(r.Accepted) > 0:
		log.Info("sandbox: run_command's commands run with every restriction enforced but the gaps sandbox.accept names", "sandbox", r.String(), "restrictions", r)
	default:
		log.Info("sandbox: run_command's commands run with every restriction enforced", "sandbox", r.String(), "restrictions", r)
	}
	for _, p := range sb.Unreadable() {
		log.Warn(fmt.Sprintf("sandbox.read_only_paths: %s does not exist, so commands cannot read it; is it misspelt?", p))
	}
	registerSandboxGauge(r, mp, log)
	return sb, nil
}

// registerSandboxGauge publishes what the sandbox enforces as the gauge
// toolwire.sandbox on mp: one series per restriction, 1 when enforced.
// A nil mp (no metrics SDK) publishes nothing.
func registerSandboxGauge(r sandbox.Restrictions, mp metric.MeterProvider, log *slog.Logger) {
	if mp == nil {
		return
	}
	m := mp.Meter("github.com/toolwire/toolwire/cmd/toolwire")
	each := map[string]bool{
		"files": r.Files, "network_tcp": r.TCP, "network_sockets": r.Sockets, "network_allowed": r.Network == sandbox.NetworkAllow,
		"syscalls": r.Syscalls, "scoped": r.Scoped, "no_new_privs": r.NoNewPrivs && r.Mode != sandbox.Off, "limits": r.Mode != sandbox.Off,
		"mediated": r.Mediated, "uid_per_session": r.Identity == sandbox.IdentitySession, "aggregate_cgroup": r.Aggregate == "cgroup",
		"aggregate_watchdog": r.Aggregate == "watchdog",
	}
	_, err := m.Int64ObservableGauge("toolwire.sandbox",
		metric.WithDescription("What run_command's sandbox enforces: 1 per enforced restriction, by mode"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for name, on := range each {
				v := int64(0)
				if on {
					v = 1
				}
				o.Observe(v, metric.WithAttributes(attribute.String("mode", string(r.Mode)), attribute.String("restriction", name)))
			}
			return nil
		}))
	if err != nil {
		log.Warn("sandbox gauge", "error", err)
	}
}

// checkSessionRoot refuses (required) or warns about (auto) a read-only path
// that holds the root of the sessions' folders: commands may read every
// read-only path, so each session could read the others' folders, which the
// sandbox exists to prevent.
func checkSessionRoot(cfg sandbox.Config, root string, log *slog.Logger) error {
	cfg = cfg.WithDefaults()
	if cfg.Mode == sandbox.Off {
		return nil
	}
	root = realPath(root)
	for _, p := range cfg.ReadOnlyPaths {
		rel, err := filepath.Rel(realPath(p), root)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		msg := fmt.Sprintf("sandbox.read_only_paths: %s holds the sessions' folders (%s): every session's commands could read the others'; move --workspace out of it", p, root)
		if cfg.Mode == sandbox.Required {
			return fmt.Errorf("serve: %s", msg)
		}
		log.Warn("sandbox: " + msg)
	}
	return nil
}

// realPath is p with its symlinks resolved, or p when it does not exist.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}
