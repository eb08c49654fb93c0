// Package auth authenticates toolwire's callers and decides which tools each
// may call. A caller proves who it is with a bearer token (the
// "authorization: Bearer <token>" metadata) or with a TLS client
// certificate; the interceptors of an Authenticator put the identity into
// the RPC's context with engine.WithCaller, and a Policy, as the server's
// engine.Permissions, allows or denies tools by caller.
//
// It is part of the gRPC surface: it may import gRPC and service/, never
// sources/, cmd/ or the engine's internals.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/toolwire/toolwire/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Token is a bearer token a server accepts: the caller's name and the
// token's hash, as HashToken returns it. Only the hash is kept, so a
// configuration file or a memory dump does not give the token away.
type Token struct {
	Name string `json:"name"`
	Hash string `json:"hash"` // "sha256:" and the hex SHA-256 of the token
}

// HashToken returns the hash by which a Token names token:
// "sha256:" followed by the hex SHA-256 of the token, what
// `printf %s "$TOKEN" | sha256sum` prints.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Config configures an Authenticator. With neither tokens nor client
// certificates configured, authentication is off and every caller is the
// anonymous caller "".
type Config struct {
	// Tokens are the bearer tokens accepted. Several tokens may share a
	// name, so a token can be rotated without downtime.
	Tokens []Token
	// ClientCertificates accepts the identity of a client certificate that
	// the server's transport credentials (ServerCredentials with a client
	// CA) have verified.
	ClientCertificates bool
	// Logger receives a line for each refused RPC. Default slog.Default().
	Logger *slog.Logger
}

// Authenticator checks the credentials of every RPC but the open ones
// (health checks and reflection, which probes and tools use unauthenticated).
type Authenticator struct {
	hashes [][sha256.Size]byte
	names  []string
	certs  bool
	log    *slog.Logger
}

// New returns an Authenticator for cfg, or an error naming the token that is
// malformed or configured twice.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{certs: cfg.ClientCertificates, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	seen := make(map[[sha256.Size]byte]string, len(cfg.Tokens))
	for i, t := range cfg.Tokens {
		if t.Name == "" {
			return nil, fmt.Errorf("token %d has no name", i)
		}
		hexSum, ok := strings.CutPrefix(t.Hash, "sha256:")
		var h [sha256.Size]byte
		if n, err := hex.Decode(h[:], []byte(hexSum)); !ok || err != nil || n != sha256.Size || len(hexSum) != 2*sha256.Size {
			return nil, fmt.Errorf("token %q: hash %q is not \"sha256:\" and 64 hex digits", t.Name, t.Hash)
		}
		if other, dup := seen[h]; dup {
			return nil, fmt.Errorf("tokens %q and %q are the same token", other, t.Name)
		}
		seen[h] = t.Name
		a.hashes = append(a.hashes, h)
		a.names = append(a.names, t.Name)
	}
	return a, nil
}

// Enabled reports whether the Authenticator checks anything.
func (a *Authenticator) Enabled() bool { return len(a.hashes) > 0 || a.certs }

// ServerOptions returns the interceptors that authenticate every RPC, to
// pass to grpc.NewServer or service.Server.Serve.
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor),
		grpc.ChainStreamInterceptor(a.StreamInterceptor),
	}
}

// UnaryInterceptor authenticates a unary RPC.
func (a *Authenticator) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor authenticates a streaming RPC.
func (a *Authenticator) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &callerStream{ServerStream: ss, ctx: ctx})
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// open reports whether method is served without authentication: health
// checks, for probes, and reflection, which reveals the API but no tool.
func open(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1alpha.ServerReflection/")
}

// authenticate returns ctx carrying the caller's identity, or an
// UNAUTHENTICATED status saying what is wrong.
func (a *Authenticator) authenticate(ctx context.Context, method string) (context.Context, error) {
	if !a.Enabled() || open(method) {
		return ctx, nil
	}
	id, err := a.identify(ctx)
	if err != nil {
		addr := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		a.log.Info("unauthenticated RPC refused", "method", method, "peer", addr, "reason", err.Error())
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return engine.WithCaller(ctx, id), nil
}

// identify returns the caller's identity: a bearer token's name when the
// RPC carries one (a wrong token is refused even on a connection with a
// valid client certificate), else a verified client certificate's.
func (a *Authenticator) identify(ctx context.Context) (string, error) {
	if vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) > 0 {
		if len(vals) > 1 {
			// Which one a proxy or the server would read is a guess;
			// refuse rather than authenticate by one and audit by another.
			return "", fmt.Errorf("%d authorization headers: send exactly one", len(vals))
		}
		if len(a.hashes) == 0 {
			return "", errors.New("this server does not accept bearer tokens; authenticate with a client certificate")
		}
		scheme, token, ok := strings.Cut(vals[0], " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
			return "", errors.New(`malformed authorization metadata: want "Bearer <token>"`)
		}
		if name, ok := a.lookup(strings.TrimSpace(token)); ok {
			return name, nil
		}
		return "", errors.New("invalid bearer token")
	}
	if a.certs {
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(ClientCertInfo); ok && info.Presented {
				if info.Err != nil {
					return "", fmt.Errorf("client certificate rejected: %w", info.Err)
				}
				return info.Identity, nil
			}
		}
	}
	switch {
	case len(a.hashes) > 0 && a.certs:
		return "", errors.New(`missing credentials: send "authorization: Bearer <token>" metadata or a client certificate`)
	case a.certs:
		return "", errors.New("missing credentials: connect with a client certificate signed by the server's client CA")
	default:
		return "", errors.New(`missing credentials: send "authorization: Bearer <token>" metadata`)
	}
}

// lookup returns the name of token. It compares the token's hash with every
// configured hash in constant time and visits all of them whatever matches,
// so the time taken tells nothing about which tokens exist.
func (a *Authenticator) lookup(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.hashes {
		eq := subtle.ConstantTimeCompare(sum[:], a.hashes[i][:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return "", false
	}
	return a.names[match], true
}
