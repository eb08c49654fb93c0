package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/toolwire/toolwire/audit"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/configfile"
	"github.com/toolwire/toolwire/internal/follow"
	"github.com/toolwire/toolwire/internal/logging"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/store/storeurl"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// serveConfig is the configuration of "toolwire serve": the YAML file given
// with --config, overridden by the flags set on the command line. It
// composes the features' Configs, each of which holds its keys, defaults,
// flags and checks; embedded, their keys sit at the top level of the
// file. Zero values mean each feature's defaults.
type serveConfig struct {
	EngineConfig         // max_calls, call_timeout, ...: how batches and calls run (engine)
	ServiceConfig        // listen, the gRPC connections' limits (service)
	Health        string `json:"health_listen"` // plaintext address serving only the health service; off when empty
	Diag          bool   `json:"diag"`          // offer the diagnostic tools
	LoggingConfig        // log_level, log_format (internal/logging)

	SecurityConfig  // tls_cert, tls_key, client_ca, auth (auth)
	Sources         // http_tools, mcp_servers, remotes, openapi and grpc_services, reloaded live (sources.go)
	WorkspaceConfig // workspace, no_workspace, run_command, sandbox (tools/workspacetools)
	StoreConfig     // store (store/storeurl)
	AdminConfig     // admin_listen (admin.go), trace_content (telemetry.go)
	HTTPConfig      // http_listen and the HTTP port's limits (httpserve)
	MCPConfig       // no_mcp and the MCP sessions' bounds (mcpserve)
	ConsoleConfig   // console (console)
	PolicyConfig    // policies, reloaded live (policy)
	AuditConfig     // audit_log and its settings (audit)
}

// WorkspaceConfig is workspacetools.Config under a name of its own, so
// that it can be embedded beside the other features' Configs.
type WorkspaceConfig = workspacetools.Config

// AuditConfig is audit.Config under a name of its own, so that it can be
// embedded beside the other features' Configs.
type AuditConfig = audit.Config

// PolicyConfig is policy.Config under a name of its own, so that it can be
// embedded beside the other features' Configs.
type PolicyConfig = policy.Config

// EngineConfig is engine.Config under a name of its own, so that it can
// be embedded beside the other features' Configs (an embedded field is
// named after its type).
type EngineConfig = engine.Config

// ServiceConfig is grpcserve.Config under a name of its own, for the same
// reason.
type ServiceConfig = grpcserve.Config

// SecurityConfig is auth.ServerConfig under a name of its own, for the
// same reason.
type SecurityConfig = auth.ServerConfig

// LoggingConfig is logging.Config under a name of its own, for the same
// reason.
type LoggingConfig = logging.Config

// StoreConfig is storeurl.Config under a name of its own, for the same
// reason.
type StoreConfig = storeurl.Config

// defaultAddr is where serve listens and the client commands connect by
// default.
const defaultAddr = grpcserve.DefaultListen

func defaultServeConfig() serveConfig {
	var cfg serveConfig
	cfg.ServiceConfig.Listen = defaultAddr
	cfg.LoggingConfig = logging.DefaultConfig()
	return cfg
}

// serveFlags returns the flag set of "toolwire serve", writing into cfg and
// configPath.
func serveFlags(cfg *serveConfig, configPath *string) *flag.FlagSet {
	fs := newFlagSet("serve", `
Settings come from the --config file; flags set on the command line override it.`, io.Discard)
	fs.StringVar(configPath, "config", "", "YAML configuration `file`; flags set on the command line override it")
	cfg.EngineConfig.Flags(fs)
	cfg.ServiceConfig.Flags(fs)
	fs.StringVar(&cfg.Health, "health-listen", cfg.Health, "plaintext `address` serving only the gRPC health service, for probes that cannot speak TLS (default off)")
	fs.BoolVar(&cfg.Diag, "diag", cfg.Diag, "offer the diagnostic tools echo, sleep and fail")
	cfg.LoggingConfig.Flags(fs)
	cfg.AuditConfig.Flags(fs)
	cfg.SecurityConfig.Flags(fs)
	cfg.WorkspaceConfig.Flags(fs)
	cfg.StoreConfig.Flags(fs)
	cfg.AdminConfig.Flags(fs)
	cfg.HTTPConfig.Flags(fs)
	cfg.MCPConfig.Flags(fs)
	cfg.ConsoleConfig.Flags(fs)
	return fs
}

// parseServeArgs parses the arguments of "toolwire serve": defaults, then
// the --config file, then the flags actually set on the command line.
func parseServeArgs(args []string, stderr io.Writer) (cfg serveConfig, help bool, err error) {
	return parseServeArgsRead(args, stderr, os.ReadFile)
}

// parseServeArgsRead is parseServeArgs reading the config file with read:
// os.ReadFile at start, which reads what it is given (a pipe such as
// --config <(…) included), and rereadConfigFile on reload.
func parseServeArgsRead(args []string, stderr io.Writer, read func(string) ([]byte, error)) (cfg serveConfig, help bool, err error) {
	cfg = defaultServeConfig()
	var path string
	fs := serveFlags(&cfg, &path)
	fs.SetOutput(stderr)
	if help, err := parseFlags(fs, args); help || err != nil {
		return cfg, help, err
	}
	if fs.NArg() > 0 {
		return cfg, false, cmdUsageError("serve", "serve: unexpected arguments %q", fs.Args())
	}
	if path == "" {
		return cfg, false, nil
	}
	fileCfg := defaultServeConfig()
	b, err := read(path)
	if err != nil {
		return cfg, false, fmt.Errorf("--config: %w", err) // "open nope.yaml: …" did not say which file it was
	}
	if err := configfile.Decode(path, b, &fileCfg); err != nil {
		return cfg, false, err
	}
	// Replay the flags that were set onto the file's configuration, so they
	// override it and unset flags leave it alone.
	var ignored string
	replay := serveFlags(&fileCfg, &ignored)
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "config" && err == nil {
			err = replay.Set(f.Name, f.Value.String())
		}
	})
	return fileCfg, false, err
}

// maxConfigBytes bounds the config file: a path mistaken for it (a log, a
// disk image) was read whole and decoded, 67 MB of YAML holding 471 MB at
// its peak. A Kubernetes ConfigMap holds at most 1 MiB.
const maxConfigBytes = 16 << 20

// readConfigFile decodes the YAML file at path into cfg. Unknown keys are an
// error, so a misspelt setting is not silently ignored.
func readConfigFile(path string, cfg *serveConfig) error {
	f, err := os.Open(path) // a pipe too: --config <(…)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxConfigBytes {
		return fmt.Errorf("%s is larger than %d MiB, more than a config file holds; is it the right file?", path, maxConfigBytes>>20)
	}
	return configfile.Decode(path, b, cfg)
}

// rereadConfigFile reads the config file again for a reload, which must
// neither block nor take a file caught between its writes for the config:
// it reads only a regular file (a named pipe in its place would block the
// reload, SIGHUP and shutdown for good; the pipe of --config <(…) would
// read as empty), and refuses an empty one, which is a file truncated and
// not yet written again (its writer's next write reloads it), not an
// operator removing every tool: that config is written {}.
func rereadConfigFile(path string) ([]byte, error) {
	b, err := follow.ReadFileAtMost(path, maxConfigBytes)
	if err == nil && len(b) == 0 {
		return nil, fmt.Errorf("%s is empty (truncated and not yet written again?); a config with no settings is written {}", path)
	}
	return b, err
}

// admission returns the server's one admission vocabulary: the security
// settings' permissions, the policies in force (policies, which reloads
// swap) and the approval rules, in that order (see policy.Rules).
func (cfg serveConfig) admission(policies *policy.Live) (*policy.Rules, error) {
	return policy.New(cfg.SecurityConfig.Permissions(), policies, cfg.PolicyConfig.Approvals)
}

// negativeMeans are the settings whose row in docs/configuration.md says
// what a negative value means (-1: no bound, or none); their features
// check them.
var negativeMeans = map[string]bool{"max_buffered_bytes": true, "max_calls_per_caller": true, "workspace_min_free_bytes": true}

// checkNegative refuses a negative count, size or duration anywhere but
// negativeMeans: each feature reads one as 0, its default, so that
// "max_calls: -1" (no bound, as max_buffered_bytes' -1 is) ran with 1024
// calls, "call_timeout: -5s" with 60s, "http_read_timeout: -1s" with 30s,
// without a word. It walks the keys as the file has them: the embedded
// Configs' at the top level, sections such as sandbox with a dot.
func (cfg *serveConfig) checkNegative() error {
	var walk func(prefix string, v reflect.Value) error
	walk = func(prefix string, v reflect.Value) error {
		for i := range v.NumField() {
			f, field := v.Type().Field(i), v.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case !f.IsExported() || key == "-":
			case f.Anonymous && key == "" && field.Kind() == reflect.Struct:
				if err := walk(prefix, field); err != nil {
					return err
				}
			case field.Kind() == reflect.Struct:
				if err := walk(prefix+key+".", field); err != nil {
					return err
				}
			case field.CanInt() && field.Int() < 0 && !negativeMeans[prefix+key]:
				if d, ok := field.Interface().(time.Duration); ok {
					return fmt.Errorf("%s%s: want a positive duration, or 0 for the default, not %v", prefix, key, d)
				}
				return fmt.Errorf("%s%s: want a positive number, or 0 for the default, not %d", prefix, key, field.Int())
			case field.CanFloat() && field.Float() < 0:
				return fmt.Errorf("%s%s: want a positive number, or 0 for the default, not %g", prefix, key, field.Float())
			}
		}
		return nil
	}
	return walk("", reflect.ValueOf(cfg).Elem())
}
