package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/service/serverstatus"
	"github.com/toolwire/toolwire/sources"
	"github.com/toolwire/toolwire/sources/reload"
	"go.opentelemetry.io/otel/metric"
)

// Sources is the part of the serve configuration that declares tool
// sources: http_tools, mcp_servers, remotes, openapi and grpc_services. It is embedded in
// serveConfig, so its keys sit at the top level of the file.
type Sources = sources.Config

// startSources starts the tool sources cfg declares and, when serve has a
// config file, keeps them and the policies in force (policies) in step
// with it until ctx is done (see sources/reload). stop waits for the
// watcher and closes the sources.
func startSources(ctx context.Context, args []string, cfg serveConfig, srcs *sources.Set, policies *policy.Live, mp metric.MeterProvider, log *slog.Logger) (stop func(), err error) {
	var next *policy.Set // compiled by Check, put in force by Apply
	var rejected atomic.Bool
	if err := instrumentReload(mp, &rejected); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return reload.Start(ctx, srcs, cfg, reload.Options[serveConfig]{
		Path: configPath(args),
		Load: func() (serveConfig, error) {
			// Read as at start: the file, then the command line's flags;
			// but the file only when it is one that can be read again.
			cfg, _, err := parseServeArgsRead(args, io.Discard, rereadConfigFile)
			return cfg, err
		},
		Sources: func(cfg serveConfig) sources.Config { return cfg.Sources },
		Check: func(cfg serveConfig) (err error) {
			next, err = policy.Compile(cfg.Policies)
			return err
		},
		Apply: func(serveConfig) {
			if policies.Swap(next) {
				log.Info("policies in force", "policies", next.Len())
			}
		},
		RestartOnly: restartOnly,
		Outcome:     func(err error) { rejected.Store(err != nil) },
		Log:         log,
	})
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

// restartOnly returns the settings of the config file, other than the
// sources' (which reload applies), whose values differ between a and b.
// Each top-level key is compared as the file writes it, so a setting added
// to serveConfig is covered without being listed here.
func restartOnly(a, b serveConfig) []string {
	a.Sources, b.Sources = Sources{}, Sources{}
	a.Policies, b.Policies = nil, nil // the approval rules are read at start only
	ka, kb := fileKeys(a), fileKeys(b)
	var changed []string
	for key, va := range ka {
		if !bytes.Equal(va, kb[key]) {
			changed = append(changed, key)
		}
	}
	for key := range kb {
		if _, ok := ka[key]; !ok {
			changed = append(changed, key)
		}
	}
	slices.Sort(changed)
	return changed
}

// fileKeys returns cfg's top-level keys and their values as JSON text, the
// form sigs.k8s.io/yaml decodes the file from.
func fileKeys(cfg serveConfig) map[string]json.RawMessage {
	b, err := json.Marshal(cfg)
	var keys map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(b, &keys)
	}
	if err != nil {
		panic("serveConfig does not marshal to a JSON object: " + err.Error()) // a bug; TestRestartOnly catches it
	}
	return keys
}

// sourceStatus reports the sources' status as the server view takes it.
func sourceStatus(srcs *sources.Set) func() []serverstatus.Source {
	return func() []serverstatus.Source {
		list := srcs.Status()
		out := make([]serverstatus.Source, len(list))
		for i, s := range list {
			out[i] = serverstatus.Source{Kind: s.Kind, Name: s.Name, Owner: s.Owner, State: s.State, Err: s.Err, Since: s.Since, Skipped: s.Skipped}
		}
		return out
	}
}
