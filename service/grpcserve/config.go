package grpcserve

import (
	"context"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/toolwire/toolwire/internal/rpctelemetry"
	"github.com/toolwire/toolwire/service/serverstatus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Config tunes the gRPC surface: its listener, its connections' limits and
// its RPCs' telemetry. The engine's settings (batch and call bounds,
// timeouts, permissions, the logger, the engine's telemetry) are not here:
// they are engine.Config's, given to engine.New by whoever makes the
// engine the surface is put on. The zero value of every field means its
// default, so Config{} is a usable configuration. The json tags are the
// keys of "toolwire serve"'s config file; the embedded Limits' keys sit at
// its top level.
type Config struct {
	// Listen is the address ListenAndServe listens on. Default
	// DefaultListen.
	Listen string `json:"listen"`
	// AllowUnauthenticated lets the port listen beyond loopback with
	// authentication off; without it serve refuses to start so
	// (CheckExposure).
	AllowUnauthenticated bool `json:"allow_unauthenticated"`
	// Limits bounds the transport's connections; see Limits for each field
	// and its default.
	Limits
	// TracerProvider makes the spans of the surface's RPCs (otelgrpc's
	// stats handler; see TelemetryOptions). Default nil: none. Pass the
	// provider of the SDK the program installed, the one it made the
	// engine's telemetry with (engine.OpenTelemetry); OpenTelemetry's
	// globals are not consulted.
	TracerProvider trace.TracerProvider `json:"-"`
	// MeterProvider makes the metrics of the surface's RPCs. Default nil:
	// none, as for TracerProvider.
	MeterProvider metric.MeterProvider `json:"-"`
	// Admin, when not nil, is served as toolwire.v1.AdminService (the
	// read-only server view) beside the ToolService, behind the same
	// authentication. Default nil: not served.
	Admin *serverstatus.View `json:"-"`
	// Admit, when not nil, decides each RPC's credentials as its stream
	// opens, before its first message is read (grpc-go reads a unary
	// request whole, up to MaxMessageBytes, before any interceptor runs:
	// an unauthenticated client held 4 MiB a stream, 800 MB from one
	// connection in 25 s). It runs on the connection's reader and must
	// not wait (auth.Verifier.VerifyNow); its error, a status, refuses
	// the stream; the context it returns is the RPC's. Package
	// service/grpcserve/auth's Admit is the one to use with its
	// interceptors. Default nil: streams open as they come.
	Admit func(ctx context.Context, method string, md metadata.MD) (context.Context, error) `json:"-"`
}

// DefaultListen is the address a server listens on unless Config.Listen
// says otherwise.
const DefaultListen = "127.0.0.1:50051"

// Flags registers the surface's flags on fs; each writes into c. The
// caller sets c's defaults first (Listen's shows in the usage); New
// applies the rest. The engine's flags are engine.Config's.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "`address` to listen on; port 0 picks a free port")
	fs.BoolVar(&c.AllowUnauthenticated, "allow-unauthenticated", c.AllowUnauthenticated, "let the gRPC port listen beyond loopback with authentication off (unsafe: anyone who reaches it may call every tool)")
	c.Limits.Flags(fs)
}

// CheckExposure refuses a port listening at addr beyond loopback while
// authentication is off, unless AllowUnauthenticated: anyone who could
// reach it could call every tool. (The HTTP port's rule is the same:
// httpserve.Config.CheckExposure.)
func (c Config) CheckExposure(addr net.Addr, authenticated bool) error {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() || authenticated || c.AllowUnauthenticated {
		return nil
	}
	return fmt.Errorf("listen %s: the gRPC port would listen beyond this machine (on %s) with authentication off, so anyone who reaches it could call every tool. "+
		"Configure callers (--tokens-file, --oidc-issuer or --client-ca; docs/auth.md), listen on a loopback address (127.0.0.1:%d), "+
		"or accept it with --allow-unauthenticated (allow_unauthenticated: true)", c.Listen, tcp.IP, tcp.Port)
}

// records reports whether c's providers record anything: the OpenTelemetry
// SDK's do, nil and the no-op ones do not (engine.OpenTelemetry makes the
// same choice).
func (c Config) records() bool {
	return rpctelemetry.Records(c.TracerProvider, c.MeterProvider)
}

// withDefaults returns c with the defaults of the transport's settings
// filled in, some of which follow the engine's (its MaxCallTimeout).
func (c Config) withDefaults(maxCallTimeout time.Duration) Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	c.Limits = c.Limits.withDefaults(maxCallTimeout)
	return c
}
