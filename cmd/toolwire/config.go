package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/toolwire/toolwire/service"
)

// serveConfig is the configuration of "toolwire serve": the YAML file given
// with --config, overridden by the flags set on the command line. Zero
// values mean service.Config's defaults.
type serveConfig struct {
	Listen    string `json:"listen"`        // address to listen on
	Health    string `json:"health_listen"` // plaintext address serving only the health service; off when empty
	Diag      bool   `json:"diag"`          // offer the diagnostic tools
	LogLevel  string `json:"log_level"`     // debug, info, warn or error
	LogFormat string `json:"log_format"`    // text or json; "" picks text on a terminal, JSON otherwise

	MaxBatches       int             `json:"max_concurrent_batches"`
	MaxCalls         int             `json:"max_calls"`
	MaxArgumentBytes int             `json:"max_argument_bytes"`
	MaxResultBytes   int             `json:"max_result_bytes"`
	CallTimeout      Duration        `json:"call_timeout"`
	MaxCallTimeout   Duration        `json:"max_call_timeout"`
	IdleTimeout      Duration        `json:"idle_timeout"`
	DeadlineMargin   Duration        `json:"deadline_margin"`
	MaxParallel      int             `json:"max_parallel"`
	AbandonGrace     Duration        `json:"abandon_grace"`
	DrainTimeout     Duration        `json:"drain_timeout"`
	EventBuffer      int             `json:"event_buffer"`
	StreamBuffer     int             `json:"max_stream_buffer_bytes"` // a batch's events waiting for a slow reader, in bytes
	SendTimeout      Duration        `json:"send_timeout"`            // end a stream whose client reads nothing this long
	Safe             map[string]bool `json:"safe"`                    // per tool: may its calls share a parallel lane

	SecurityConfig  // TLS, auth, permissions, limits: auth.go
	Sources         // http_tools, mcp_servers and remotes, reloaded live (sources.go)
	WorkspaceConfig // workspace, no_workspace, run_command
	StoreConfig
	AdminListen  string `json:"admin_listen"`  // admin HTTP address: /metrics, /debug/pprof/; off when empty
	TraceContent bool   `json:"trace_content"` // record calls' arguments and results in spans
}

const defaultAddr = "127.0.0.1:50051"

func defaultServeConfig() serveConfig {
	return serveConfig{Listen: defaultAddr, LogLevel: "info"}
}

// Duration is a time.Duration written in YAML as a string such as "30s" or
// "1m30s".
type Duration time.Duration

// UnmarshalJSON parses a duration string; sigs.k8s.io/yaml turns YAML into
// JSON before decoding, so this serves YAML too.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration as a string such as \"30s\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as \"30s\" or \"1m30s\", not %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string such as "30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// serveFlags returns the flag set of "toolwire serve", writing into cfg and
// configPath.
func serveFlags(cfg *serveConfig, configPath *string) *flag.FlagSet {
	fs := newFlagSet("serve", `
Settings come from the --config file; flags set on the command line override it.`, io.Discard)
	fs.StringVar(configPath, "config", "", "YAML configuration `file`; flags set on the command line override it")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "`address` to listen on; port 0 picks a free port")
	fs.StringVar(&cfg.Health, "health-listen", cfg.Health, "plaintext `address` serving only the gRPC health service, for probes that cannot speak TLS (default off)")
	fs.BoolVar(&cfg.Diag, "diag", cfg.Diag, "offer the diagnostic tools echo, sleep and fail")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log `format`: text or json (default text when stderr is a terminal, json otherwise)")
	fs.IntVar(&cfg.MaxBatches, "max-batches", cfg.MaxBatches, "most batches running at once; more are refused with RESOURCE_EXHAUSTED (0: 4096)")
	fs.IntVar(&cfg.MaxCalls, "max-calls", cfg.MaxCalls, "most calls in one batch (0: 1024)")
	fs.IntVar(&cfg.MaxArgumentBytes, "max-argument-bytes", cfg.MaxArgumentBytes, "largest arguments of one call, in bytes (0: 1 MiB)")
	fs.IntVar(&cfg.MaxResultBytes, "max-result-bytes", cfg.MaxResultBytes, "cap on one result's output, in bytes (0: 256 KiB)")
	durationVar(fs, &cfg.CallTimeout, "call-timeout", "timeout of calls that set none (0: 60s)")
	durationVar(fs, &cfg.MaxCallTimeout, "max-call-timeout", "cap on every call's timeout (0: 10m)")
	durationVar(fs, &cfg.IdleTimeout, "idle-timeout", "time a call out after this long without progress (0: off)")
	fs.IntVar(&cfg.MaxParallel, "max-parallel", cfg.MaxParallel, "most calls running at once in a parallel lane (0: 16)")
	durationVar(fs, &cfg.AbandonGrace, "abandon-grace", "how long a cancelled tool may take to return before it is abandoned (0: 2s)")
	durationVar(fs, &cfg.DrainTimeout, "drain-timeout", "how long shutdown lets running batches finish (0: 30s)")
	fs.IntVar(&cfg.StreamBuffer, "max-stream-buffer-bytes", cfg.StreamBuffer, "bytes of one batch's events that may wait for a slow reader (0: 1 MiB)")
	durationVar(fs, &cfg.SendTimeout, "send-timeout", "end a stream whose client has read nothing for this long, cancelling its calls (0: 30s)")
	cfg.SecurityConfig.register(fs)
	workspaceFlags(fs, &cfg.WorkspaceConfig)
	storeFlags(fs, &cfg.StoreConfig)
	fs.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "admin HTTP `address` serving /metrics (Prometheus) and /debug/pprof/ (default off)")
	fs.BoolVar(&cfg.TraceContent, "trace-content", cfg.TraceContent, "record calls' arguments and results in their spans (they may hold secrets)")
	return fs
}

func durationVar(fs *flag.FlagSet, d *Duration, name, usage string) {
	fs.DurationVar((*time.Duration)(d), name, time.Duration(*d), usage)
}

// parseServeArgs parses the arguments of "toolwire serve": defaults, then
// the --config file, then the flags actually set on the command line.
func parseServeArgs(args []string, stderr io.Writer) (cfg serveConfig, help bool, err error) {
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
	if err := readConfigFile(path, &fileCfg); err != nil {
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

// readConfigFile decodes the YAML file at path into cfg. Unknown keys are an
// error, so a misspelt setting is not silently ignored.
func readConfigFile(path string, cfg *serveConfig) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return decodeYAML(path, b, cfg)
}

// logLevel parses cfg.LogLevel.
func (cfg serveConfig) logLevel() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", cfg.LogLevel)
	}
	return l, nil
}

// service returns the server's configuration.
func (cfg serveConfig) service(log *slog.Logger) service.Config {
	return service.Config{
		Listen:               cfg.Listen,
		MaxConcurrentBatches: cfg.MaxBatches,
		MaxCallsPerBatch:     cfg.MaxCalls,
		MaxArgumentBytes:     cfg.MaxArgumentBytes,
		MaxResultBytes:       cfg.MaxResultBytes,
		DefaultCallTimeout:   time.Duration(cfg.CallTimeout),
		MaxCallTimeout:       time.Duration(cfg.MaxCallTimeout),
		IdleTimeout:          time.Duration(cfg.IdleTimeout),
		DeadlineMargin:       time.Duration(cfg.DeadlineMargin),
		MaxParallel:          cfg.MaxParallel,
		AbandonGrace:         time.Duration(cfg.AbandonGrace),
		DrainTimeout:         time.Duration(cfg.DrainTimeout),
		EventBuffer:          cfg.EventBuffer,
		MaxStreamBufferBytes: cfg.StreamBuffer,
		SendTimeout:          time.Duration(cfg.SendTimeout),
		Safe:                 cfg.Safe,
		Logger:               log,
		Permissions:          cfg.permissions(),
		Limits:               cfg.limits(),
		TraceContent:         cfg.TraceContent,
	}
}
