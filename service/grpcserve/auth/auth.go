// Package auth is the gRPC adapter of package auth
// (github.com/toolwire/toolwire/auth), which decides who a request comes
// from the same way on every surface: interceptors that authenticate each
// RPC with an auth.Verifier and put its caller into the RPC's context
// (engine.WithCaller), and transport credentials that serve TLS and ask
// clients for a certificate, which the Verifier checks for each RPC. It only
// reads the credentials off gRPC (the "authorization" metadata, the peer's
// AuthInfo) and answers UNAUTHENTICATED with the Verifier's reason; what a
// token or a certificate means is the Verifier's.
//
// In this package's files, auth names that package; this one defines none
// of its names. It is part of the gRPC surface: it may import gRPC and
// service/, never sources/, cmd/ or the engine's internals.
package auth

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/logcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ServerOptions returns the options with which a gRPC server serves c's
// TLS (ServerCredentials, when c names a certificate) and authenticates
// every RPC with v (Interceptors), logging refusals on log.
func ServerOptions(c auth.ServerConfig, v *auth.Verifier, log *slog.Logger) ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if c.TLSCert != "" {
		creds, err := ServerCredentials(c.TLSCert, c.TLSKey, v)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(creds))
	}
	return append(opts, Interceptors(v, log)...), nil
}

// Interceptors returns the interceptors that authenticate every RPC but
// the open ones (health checks and reflection, which probes and tools use
// unauthenticated) with v, as options for grpc.NewServer or
// grpcserve.Server.Serve; none when v checks nothing. log receives a line
// for each refused RPC; nil means slog.Default().
func Interceptors(v *auth.Verifier, log *slog.Logger) []grpc.ServerOption {
	if !v.Enabled() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryInterceptor(v, log)),
		grpc.ChainStreamInterceptor(StreamInterceptor(v, log)),
	}
}

// Admit returns the function for grpcserve.Config.Admit: it decides each
// RPC's credentials with v as its stream opens, before its message is
// read, so that a client without valid credentials cannot make the
// server hold its requests (a unary request is read whole before any
// interceptor runs). It decides without waiting (auth.Verifier.VerifyNow);
// where that would have waited (an issuer's keys to fetch), it lets the
// stream open and the interceptors decide, as they decide every RPC of a
// server without Admit. An RPC it admitted is not checked again. The open
// methods, served without credentials, it bounds instead (see
// OpenHealthReads); the interceptors tell it when a health check's request
// has been read, so use it with Interceptors. nil when v checks nothing.
func Admit(v *auth.Verifier, log *slog.Logger) func(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
	return admit(v, log, newOpenGate(OpenHealthReads, OpenReflections, OpenReadTimeout))
}

func admit(v *auth.Verifier, log *slog.Logger, gate *openGate) func(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
	if !v.Enabled() {
		return nil
	}
	g := newGuard(v, log)
	return func(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
		if open(method) {
			if isHealth(method) {
				return gate.admitHealth(ctx)
			}
			if _, err := g.v.VerifyNow(ctx, g.credentials(ctx, md["authorization"])); err == nil {
				return ctx, nil // reflection, by a caller
			}
			return gate.admitReflection(ctx)
		}
		id, err := g.v.VerifyNow(ctx, g.credentials(ctx, md["authorization"]))
		switch {
		case errors.Is(err, auth.ErrWouldWait):
			return ctx, nil // the interceptor waits
		case err != nil:
			return nil, g.refuse(ctx, method, err)
		}
		return context.WithValue(engine.WithIdentity(ctx, id), admitted{}, true), nil
	}
}

// admitted marks, in an RPC's context, that Admit authenticated it.
type admitted struct{}

// UnaryInterceptor authenticates a unary RPC with v; see Interceptors.
func UnaryInterceptor(v *auth.Verifier, log *slog.Logger) grpc.UnaryServerInterceptor {
	g := newGuard(v, log)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if open(info.FullMethod) {
			requestRead(ctx) // for Admit's bound on open reads
		}
		ctx, err := g.authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authenticates a streaming RPC with v; see
// Interceptors.
func StreamInterceptor(v *auth.Verifier, log *slog.Logger) grpc.StreamServerInterceptor {
	g := newGuard(v, log)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := g.authenticate(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if isHealth(info.FullMethod) {
			return handler(srv, &firstRead{ServerStream: ss}) // Watch: for Admit's bound on open reads
		}
		return handler(srv, &callerStream{ServerStream: ss, ctx: ctx})
	}
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// guard is what the interceptors share.
type guard struct {
	v     *auth.Verifier
	log   *slog.Logger
	certs bool // v.AcceptsCertificates()

	refusals logcut.Limit // the lines logged for refused RPCs
}

func newGuard(v *auth.Verifier, log *slog.Logger) *guard {
	if log == nil {
		log = slog.Default()
	}
	return &guard{v: v, log: log, certs: v.AcceptsCertificates()}
}

// open reports whether method is served without authentication: health
// checks, for probes, and reflection, which reveals the API but no tool.
func open(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1alpha.ServerReflection/")
}

// authenticate returns ctx carrying the caller's identity, or an
// UNAUTHENTICATED status with the Verifier's reason.
func (g *guard) authenticate(ctx context.Context, method string) (context.Context, error) {
	if !g.v.Enabled() || open(method) || ctx.Value(admitted{}) != nil {
		return ctx, nil
	}
	id, err := g.v.Verify(ctx, g.credentials(ctx, metadata.ValueFromIncomingContext(ctx, "authorization")))
	if err != nil {
		return nil, g.refuse(ctx, method, err)
	}
	return engine.WithIdentity(ctx, id), nil
}

// credentials are what the RPC presents: its authorization metadata,
// else the client certificate of its connection.
func (g *guard) credentials(ctx context.Context, authorization []string) auth.Credentials {
	creds := auth.Credentials{Authorization: authorization}
	if g.certs && len(creds.Authorization) == 0 {
		// A token, when there is one, decides alone. The chain is
		// checked again for each RPC, as on HTTP, so that a certificate
		// that expired, or whose CA was dropped, stops naming its caller
		// on the connections it opened before; the Verifier remembers a
		// chain's check, so an RPC pays for a hash of it, not a check.
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(ClientCertInfo); ok {
				creds.PeerCertificates = info.State.PeerCertificates
			}
		}
	}
	return creds
}

// refuse logs the refusal of an RPC (at most 10 lines every 10 s) and
// returns its UNAUTHENTICATED status, with the Verifier's reason.
func (g *guard) refuse(ctx context.Context, method string, err error) error {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	if ok, held := g.refusals.Allow(); ok {
		g.log.Info("unauthenticated RPC refused", "method", logcut.String(method), "peer", addr, "reason", err.Error(), "not_logged_before", held)
	}
	return status.Error(codes.Unauthenticated, err.Error())
}
