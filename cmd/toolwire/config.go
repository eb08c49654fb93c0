package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/toolwire/toolwire/internal/logging"
	"github.com/toolwire/toolwire/service"
	"github.com/toolwire/toolwire/service/auth"
	"github.com/toolwire/toolwire/store/storeurl"
)

// serveConfig is the configuration of "toolwire serve": the YAML file given
// with --config, overridden by the flags set on the command line. Zero
// values mean service.Config's defaults.
type serveConfig struct {
	Listen        string `json:"listen"`        // address to listen on
	Health        string `json:"health_listen"` // plaintext address serving only the health service; off when empty
	Diag          bool   `json:"diag"`          // offer the diagnostic tools
	LoggingConfig        // log_level, log_format (internal/logging)

	MaxBatches       int             `json:"max_concurrent_batches"`
	MaxCalls         int             `json:"max_calls"`
	MaxArgumentBytes int             `json:"max_argument_bytes"`
	MaxResultBytes   int             `json:"max_result_bytes"`
	CallTimeout      time.Duration   `json:"call_timeout"`
	MaxCallTimeout   time.Duration   `json:"max_call_timeout"`
	IdleTimeout      time.Duration   `json:"idle_timeout"`
	DeadlineMargin   time.Duration   `json:"deadline_margin"`
	MaxParallel      int             `json:"max_parallel"`
	AbandonGrace     time.Duration   `json:"abandon_grace"`
	DrainTimeout     time.Duration   `json:"drain_timeout"`
	EventBuffer      int             `json:"event_buffer"`
	StreamBuffer     int             `json:"max_stream_buffer_bytes"` // a batch's events waiting for a slow reader, in bytes
	SendTimeout      time.Duration   `json:"send_timeout"`            // end a stream whose client reads nothing this long
	Safe             map[string]bool `json:"safe"`                    // per tool: may its calls share a parallel lane

	SecurityConfig  // tls_cert, tls_key, client_ca, auth (service/auth)
	service.Limits  // max_concurrent_calls, max_queue_wait, ... (service/limits_config.go)
	Sources         // http_tools, mcp_servers and remotes, reloaded live (sources.go)
	WorkspaceConfig // workspace, no_workspace, run_command, sandbox (tools/workspacetools)
	StoreConfig     // store (store/storeurl)
	// The idempotency and session settings go to service.Config.
	IdempotencyTTL   time.Duration `json:"idempotency_ttl"`   // how long completed calls are replayed
	IdempotencyLease time.Duration `json:"idempotency_lease"` // how long a dead replica's claim blocks retries
	SessionTTL       time.Duration `json:"session_ttl"`       // how long session variables live
	AdminConfig                    // admin_listen (admin.go)
	TraceContent     bool          `json:"trace_content"` // record calls' arguments and results in spans
}

// SecurityConfig is auth.ServerConfig under a name of its own, so that it
// can be embedded beside the other features' Configs.
type SecurityConfig = auth.ServerConfig

// LoggingConfig is logging.Config under a name of its own, for the same
// reason.
type LoggingConfig = logging.Config

// StoreConfig is storeurl.Config under a name of its own, for the same
// reason.
type StoreConfig = storeurl.Config

const defaultAddr = "127.0.0.1:50051"

func defaultServeConfig() serveConfig {
	return serveConfig{Listen: defaultAddr, LoggingConfig: logging.DefaultConfig()}
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
	cfg.LoggingConfig.Flags(fs)
	fs.IntVar(&cfg.MaxBatches, "max-batches", cfg.MaxBatches, "most batches running at once; more are refused with RESOURCE_EXHAUSTED (0: 4096)")
	fs.IntVar(&cfg.MaxCalls, "max-calls", cfg.MaxCalls, "most calls in one batch (0: 1024)")
	fs.IntVar(&cfg.MaxArgumentBytes, "max-argument-bytes", cfg.MaxArgumentBytes, "largest arguments of one call, in bytes (0: 1 MiB)")
	fs.IntVar(&cfg.MaxResultBytes, "max-result-bytes", cfg.MaxResultBytes, "cap on one result's output, in bytes (0: 256 KiB)")
	fs.DurationVar(&cfg.CallTimeout, "call-timeout", cfg.CallTimeout, "timeout of calls that set none (0: 60s)")
	fs.DurationVar(&cfg.MaxCallTimeout, "max-call-timeout", cfg.MaxCallTimeout, "cap on every call's timeout (0: 10m)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "time a call out after this long without progress (0: off)")
	fs.IntVar(&cfg.MaxParallel, "max-parallel", cfg.MaxParallel, "most calls running at once in a parallel lane (0: 16)")
	fs.DurationVar(&cfg.AbandonGrace, "abandon-grace", cfg.AbandonGrace, "how long a cancelled tool may take to return before it is abandoned (0: 2s)")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long shutdown lets running batches finish (0: 30s)")
	fs.IntVar(&cfg.StreamBuffer, "max-stream-buffer-bytes", cfg.StreamBuffer, "bytes of one batch's events that may wait for a slow reader (0: 1 MiB)")
	fs.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout, "end a stream whose client has read nothing for this long, cancelling its calls (0: 30s)")
	cfg.SecurityConfig.Flags(fs)
	cfg.Limits.Flags(fs)
	cfg.WorkspaceConfig.Flags(fs)
	cfg.StoreConfig.Flags(fs)
	fs.DurationVar(&cfg.IdempotencyTTL, "idempotency-ttl", cfg.IdempotencyTTL, "how long a completed call with an idempotency key is replayed instead of run (0: 24h)")
	fs.DurationVar(&cfg.IdempotencyLease, "idempotency-lease", cfg.IdempotencyLease, "how long a claim on a running call lasts unless renewed; bounds how long retries wait for a replica that died (0: 10s)")
	fs.DurationVar(&cfg.SessionTTL, "session-ttl", cfg.SessionTTL, "how long a session variable lives after it was last set (0: 24h)")
	cfg.AdminConfig.Flags(fs)
	fs.BoolVar(&cfg.TraceContent, "trace-content", cfg.TraceContent, "record calls' arguments and results in their spans (they may hold secrets)")
	return fs
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

// service returns the server's configuration.
func (cfg serveConfig) service(log *slog.Logger) service.Config {
	return service.Config{
		Listen:               cfg.Listen,
		MaxConcurrentBatches: cfg.MaxBatches,
		MaxCallsPerBatch:     cfg.MaxCalls,
		MaxArgumentBytes:     cfg.MaxArgumentBytes,
		MaxResultBytes:       cfg.MaxResultBytes,
		DefaultCallTimeout:   cfg.CallTimeout,
		MaxCallTimeout:       cfg.MaxCallTimeout,
		IdleTimeout:          cfg.IdleTimeout,
		DeadlineMargin:       cfg.DeadlineMargin,
		MaxParallel:          cfg.MaxParallel,
		AbandonGrace:         cfg.AbandonGrace,
		DrainTimeout:         cfg.DrainTimeout,
		EventBuffer:          cfg.EventBuffer,
		MaxStreamBufferBytes: cfg.StreamBuffer,
		SendTimeout:          cfg.SendTimeout,
		Safe:                 cfg.Safe,
		Logger:               log,
		Permissions:          cfg.Permissions(),
		Limits:               cfg.Limits,
		TraceContent:         cfg.TraceContent,
		IdempotencyTTL:       cfg.IdempotencyTTL,
		IdempotencyLease:     cfg.IdempotencyLease,
		SessionTTL:           cfg.SessionTTL,
	}
}
