package grpcserve

import (
	"flag"
	"time"
)

// Limits bounds the connections a server keeps; the work it takes on is
// bounded by the engine's settings (engine.Config). The zero value of every
// field means its default. Its keys sit at the top level of serve's config
// file; Flags registers the flag of one.
type Limits struct {
	// KeepaliveMinTime is the shortest interval at which a client may ping;
	// a client that pings more often is sent GOAWAY ("too_many_pings") and
	// disconnected. Pings without active RPCs are permitted. Default 10s
	// (grpc-go clients cannot ping more often anyway).
	KeepaliveMinTime time.Duration `json:"keepalive_min_time"`
	// KeepaliveTime is how long a connection may be idle before the server
	// pings it, and KeepaliveTimeout how long it then waits for the answer
	// before closing the connection, so dead peers are noticed. Defaults 1m
	// and 20s.
	KeepaliveTime    time.Duration `json:"keepalive_time"`
	KeepaliveTimeout time.Duration `json:"keepalive_timeout"`
	// MaxConnectionAge, when positive, makes the server send GOAWAY to a
	// connection after about this long (gRPC adds ±10% jitter), so that
	// clients reconnect and spread over the replicas behind a load
	// balancer, including ones added since they connected. RPCs in flight
	// get MaxConnectionAgeGrace to finish before the connection is closed.
	// Default 0: connections live forever; 5m to 30m suits replicated
	// deployments.
	MaxConnectionAge time.Duration `json:"max_connection_age"`
	// MaxConnectionAgeGrace is how long RPCs in flight may continue on a
	// connection past its MaxConnectionAge. Default MaxCallTimeout, so a
	// call started just before the GOAWAY can finish.
	MaxConnectionAgeGrace time.Duration `json:"max_connection_age_grace"`
	// MaxConcurrentStreams bounds the RPCs open at once on one client
	// connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS): a client
	// past it waits for one to end (grpc-go, grpc-js and grpcio queue), and
	// a stream a client opens anyway is refused. Without it one connection
	// could hold streams without end (about 11.5 KiB each; a WatchTools
	// or AttachBatch stream is not a batch, which max_concurrent_batches
	// bounds), and grpc-go bounds its handler goroutines per connection
	// by it. Default 4096, max_concurrent_batches's default.
	MaxConcurrentStreams int `json:"max_concurrent_streams"`
	// MaxConnections bounds the client connections open at once on the
	// port; one accepted past it is closed at once (and logged), so its
	// client tries again or another replica. Each open connection holds
	// about 50 KiB and a file descriptor even when idle. Default 4096; -1:
	// no bound. Serve applies it, not ServerOptions.
	MaxConnections int `json:"max_connections"`
	// HandshakeTimeout bounds how long a new connection may take to
	// complete its TLS handshake and HTTP/2 preface; one that sends
	// nothing is closed after it. Default 10s (gRPC's own is 120s).
	HandshakeTimeout time.Duration `json:"handshake_timeout"`
}

// DefaultMaxConnections is Limits.MaxConnections's default.
const DefaultMaxConnections = 4096

// DefaultMaxConcurrentStreams is Limits.MaxConcurrentStreams's default.
const DefaultMaxConcurrentStreams = 4096

// Flags registers --max-connection-age on fs, writing into l; the rest are
// set in the config file.
func (l *Limits) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&l.MaxConnectionAge, "max-connection-age", l.MaxConnectionAge, "close connections after about this long so clients rebalance (0: never)")
}

// withDefaults fills in the transport's defaults; the engine's
// (MaxConcurrentCalls, MaxQueueWait, MaxCallsPerCaller, MaxMessageBytes)
// are engine.Config's.
func (l Limits) withDefaults(maxCallTimeout time.Duration) Limits {
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&l.KeepaliveMinTime, 10*time.Second)
	defDur(&l.KeepaliveTime, time.Minute)
	defDur(&l.KeepaliveTimeout, 20*time.Second)
	l.MaxConnectionAge = max(l.MaxConnectionAge, 0)
	defDur(&l.MaxConnectionAgeGrace, maxCallTimeout)
	if l.MaxConcurrentStreams <= 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	defDur(&l.HandshakeTimeout, 10*time.Second)
	return l
}
