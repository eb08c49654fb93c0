package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/ringhash" // registers ring_hash_experimental
	"google.golang.org/grpc/metadata"
)

// SessionHeader is the request header that carries a batch's session, for
// load balancers that keep a session on one server (see
// WithSessionAffinity).
const SessionHeader = "toolwire-session"

// SessionAffinityServiceConfig is the gRPC service config
// WithSessionAffinity sets: the ring_hash policy (gRFC A42), keyed on
// SessionHeader (gRFC A76). gRPC registers ring_hash under the name
// ring_hash_experimental.
const SessionAffinityServiceConfig = `{"loadBalancingConfig":[{"ring_hash_experimental":{"requestHashHeader":"` + SessionHeader + `"}}]}`

// WithSessionAffinity sends every batch of one session to the same server
// when the target resolves to several, such as the pods of a headless
// Kubernetes Service ("dns:///toolwire-headless.ns.svc.cluster.local:50051"),
// so a session keeps its workspace folder (with toolwire serve
// --workspace-per-session, a session's folder lives on the replica that
// served it). It
// sets the service config SessionAffinityServiceConfig, consistent hashing
// on the session, and has ExecuteBatch and CallTool send the session_id in
// SessionHeader. Batches without a session go to any ready server. When
// servers come or go, a share of the sessions moves to another one (and
// starts with an empty folder there).
//
// By default there is no affinity: the target's own policy (pick_first
// unless its service config says otherwise) decides. A service config
// given with WithDialOptions(grpc.WithDefaultServiceConfig(...)) overrides
// this one. RPCs made through ToolService directly must set SessionHeader
// themselves.
func WithSessionAffinity() Option {
	return func(o *options) {
		o.affinity = true
		o.dialOpts = append([]grpc.DialOption{grpc.WithDefaultServiceConfig(SessionAffinityServiceConfig)}, o.dialOpts...)
	}
}

// withSession returns ctx carrying the session's key in SessionHeader, when
// the client keeps sessions on one server and the batch has a session.
func (c *Client) withSession(ctx context.Context, session string) context.Context {
	if !c.affinity || session == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, SessionHeader, sessionKey(session))
}

// maxSessionKey bounds the header value, well inside gRPC's metadata limit.
const maxSessionKey = 256

// sessionKey is the header value for a session: the ID itself when it is
// printable ASCII (as header values must be) of at most maxSessionKey
// bytes, "sha256:" and its SHA-256 in hex otherwise. Only its stability
// matters: ring_hash hashes it again.
func sessionKey(id string) string {
	hash := len(id) > maxSessionKey
	for i := 0; i < len(id) && !hash; i++ {
		hash = id[i] < 0x20 || id[i] > 0x7e
	}
	if !hash {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}
