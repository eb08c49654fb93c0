package service

import (
	"flag"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolwire/toolwire/engine"
)

// Config tunes a Server: the engine's settings (EngineConfig, handed to
// the engine as they are) and the transport's. The zero value of every
// field means its default, so Config{} is a usable configuration. The json
// tags are the keys of "toolwire serve"'s config file; the embedded
// Configs' keys sit at its top level.
type Config struct {
	// Listen is the address ListenAndServe listens on. Default
	// DefaultListen.
	Listen string `json:"listen"`
	// EngineConfig holds the engine's settings: batch and call bounds,
	// timeouts, lanes, buffers, idempotency and sessions, permissions,
	// concurrency limits, the logger. See engine.Config for each field and
	// its default.
	EngineConfig
	// Limits bounds the transport's connections; see Limits for each field
	// and its default.
	Limits
	// TracerProvider makes the server's spans: the RPC's (otelgrpc), one
	// per batch and one per call. Default nil: no spans. Pass the provider
	// of the SDK the program installed; OpenTelemetry's globals are not
	// consulted, so the choice is made once, in New (see
	// engine.OpenTelemetry).
	TracerProvider trace.TracerProvider `json:"-"`
	// MeterProvider makes the server's metrics. Default nil: none, as for
	// TracerProvider.
	MeterProvider metric.MeterProvider `json:"-"`
	// TraceContent records each call's arguments and result in its span
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result). They may hold
	// personal or secret data, so the default is off.
	TraceContent bool `json:"trace_content"`
}

// DefaultListen is the address a server listens on unless Config.Listen
// says otherwise.
const DefaultListen = "127.0.0.1:50051"

// EngineConfig is engine.Config under a name of its own, so that Config
// can embed it (its keys at the top level, its fields promoted) beside
// Limits.
type EngineConfig = engine.Config

// Flags registers the server's flags, the engine's among them, on fs;
// each writes into c. The caller sets c's defaults first (Listen's shows
// in the usage); New applies the rest.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "`address` to listen on; port 0 picks a free port")
	c.EngineConfig.Flags(fs)
	c.Limits.Flags(fs)
	fs.BoolVar(&c.TraceContent, "trace-content", c.TraceContent, "record calls' arguments and results in their spans (they may hold secrets)")
}

// engine returns the engine's part of c, with the telemetry c's providers
// make unless it sets its own.
func (c Config) engine() engine.Config {
	ec := c.EngineConfig
	if ec.Telemetry == nil {
		ec.Telemetry = engine.OpenTelemetry(c.TracerProvider, c.MeterProvider, c.TraceContent)
	}
	return ec
}

// withDefaults returns c with the defaults of the transport's settings
// filled in, and the engine's settings as ec (the engine's Config, its
// defaults filled in) has them.
func (c Config) withDefaults(ec engine.Config) Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	c.EngineConfig = ec
	c.Limits = c.Limits.withDefaults(ec.MaxCallTimeout)
	return c
}
