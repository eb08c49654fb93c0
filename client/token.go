package client

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// WithToken sends token as "authorization: Bearer <token>" metadata with
// every RPC, for a server that authenticates callers by token. It requires
// transport security (WithTransportCredentials with TLS): without it New
// returns an error rather than send the token in the clear. By default no
// token is sent.
func WithToken(token string) Option {
	return WithPerRPCCredentials(bearer{token: token, secure: true})
}

// WithInsecureToken is WithToken that also sends the token over plaintext
// connections: for a server on the same host, or behind a service mesh that
// encrypts the traffic between pods. Anyone who can read the traffic can
// then read the token.
func WithInsecureToken(token string) Option {
	return WithPerRPCCredentials(bearer{token: token})
}

// bearer is a bearer token as gRPC per-RPC credentials.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

var _ credentials.PerRPCCredentials = bearer{}
