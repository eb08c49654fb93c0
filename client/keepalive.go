package client

import (
	"time"

	"google.golang.org/grpc/keepalive"
)

// The client's keepalive unless WithKeepalive says otherwise: above a
// toolwire server's keepalive_min_time (10s by default), which answers
// pings more frequent than it with GOAWAY (ENHANCE_YOUR_CALM).
const (
	defaultKeepaliveTime    = 30 * time.Second
	defaultKeepaliveTimeout = 10 * time.Second
)

// WithKeepalive sets how long an RPC's connection may be silent before the
// client pings the server (idle), and how long it then waits for the answer
// (timeout) before closing the connection, failing the RPCs on it with
// UNAVAILABLE. Without pings a connection that died without closing (a
// frozen server, a path that drops packets) holds a stream until the
// caller's deadline, and WithReattach, which acts on an error, never
// resumes it. Pings are sent only while an RPC is open. gRPC raises an idle
// below 10s to 10s, and a toolwire server disconnects a client that pings
// more often than its keepalive_min_time (default 10s). Default 30s and
// 10s; an idle of 0 sends no pings. grpc.WithKeepaliveParams given to
// WithDialOptions wins over this.
func WithKeepalive(idle, timeout time.Duration) Option {
	return func(o *options) { o.keepalive = keepalive.ClientParameters{Time: idle, Timeout: timeout} }
}
