package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// CheckSessionRoot checks root, the folder that holds the sessions' own
// folders, against the read-only paths: commands may read every read-only
// path, so one that holds root would let each session read the others'
// folders, which the sandbox exists to prevent. Required mode refuses it
// (err); auto mode starts, and warning says why it should not.
func (c Config) CheckSessionRoot(root string) (warning string, err error) {
	c = c.WithDefaults()
	if c.Mode == Off {
		return "", nil
	}
	root = realPath(root)
	for _, p := range c.ReadOnlyPaths {
		rel, err := filepath.Rel(realPath(p), root)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		msg := fmt.Sprintf("sandbox.read_only_paths: %s holds the sessions' folders (%s): every session's commands could read the others'; move --workspace out of it", p, root)
		if c.Mode == Required {
			return "", fmt.Errorf("%s", msg)
		}
		return "sandbox: " + msg, nil
	}
	return "", nil
}

// realPath is p with its symlinks resolved, or p when it does not exist.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// Gauge publishes what r enforces as the gauge toolwire.sandbox on mp: one
// series per restriction, 1 when enforced, labelled with the mode. A nil
// mp (no metrics SDK) publishes nothing.
func (r Restrictions) Gauge(mp metric.MeterProvider) error {
	if mp == nil {
		return nil
	}
	each := map[string]bool{
		"files": r.Files, "network_tcp": r.TCP, "network_sockets": r.Sockets, "network_allowed": r.Network == NetworkAllow,
		"syscalls": r.Syscalls, "scoped": r.Scoped, "no_new_privs": r.NoNewPrivs && r.Mode != Off, "limits": r.Mode != Off,
		"mediated": r.Mediated, "uid_per_session": r.Identity == IdentitySession, "aggregate_cgroup": r.Aggregate == "cgroup",
		"aggregate_watchdog": r.Aggregate == "watchdog",
	}
	_, err := mp.Meter("github.com/toolwire/toolwire/tools/runcommand/sandbox").Int64ObservableGauge("toolwire.sandbox",
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
	return err
}
