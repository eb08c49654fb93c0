package grpcserve

import (
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// MaxHeaderBytes bounds a request's metadata (HTTP/2's header list size:
// names, values and 32 bytes a field), as the HTTP port's MaxHeaderBytes
// bounds its headers. grpc-go's default, 16 MiB a stream, let one client
// hold gigabytes in a few hundred streams' metadata, decoded before any
// authentication; a bearer token, a trace context and a client's own
// headers fit many times over.
const MaxHeaderBytes = 64 << 10

// ServerOptions returns the grpc.ServerOptions that enforce the transport's
// limits: the request's metadata (MaxHeaderBytes), the streams open on a
// connection (MaxConcurrentStreams), the time a new connection has for its
// handshake (HandshakeTimeout), message sizes (the engine's MaxMessageBytes; sent ones up to its
// ListLimit, for ListTools), keepalive and connection age, the codec
// that keeps an encoded message's buffer near its size (messageCodec), and
// the tap handle (grpc.InTapHandle) through which SendTimeout ends the
// stream of a client that reads nothing; grpc-go takes one tap handle only,
// so do not pass another. Serve applies them before its own options; a program that
// registers the server on a grpc.Server of its own passes them to
// grpc.NewServer.
func (s *Server) ServerOptions() []grpc.ServerOption {
	c := &s.cfg
	maxMsg := s.engine.Config().MaxMessageBytes // the largest event the engine sends
	return []grpc.ServerOption{
		grpc.InTapHandle(s.stoppable),
		newMessageCodec(),
		grpc.MaxHeaderListSize(MaxHeaderBytes),
		grpc.ConnectionTimeout(c.HandshakeTimeout),
		grpc.MaxConcurrentStreams(uint32(min(c.MaxConcurrentStreams, math.MaxUint32))),
		grpc.MaxRecvMsgSize(maxMsg),
		// The engine bounds what is sent: events within maxMsg, and a
		// ListTools response, which may list every tool at once for a
		// client that does not page, within ListLimit.
		grpc.MaxSendMsgSize(max(maxMsg, s.engine.ListLimit())),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: c.KeepaliveMinTime,
			// Agent runtimes sit idle between model turns; their pings then
			// keep the connection warm and are no abuse.
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  c.KeepaliveTime,
			Timeout:               c.KeepaliveTimeout,
			MaxConnectionAge:      c.MaxConnectionAge, // 0: gRPC's default, forever
			MaxConnectionAgeGrace: c.MaxConnectionAgeGrace,
		}),
	}
}
