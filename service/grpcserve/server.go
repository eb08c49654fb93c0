// Package service is toolwire's gRPC surface: the ToolService handlers over
// an engine (package engine, which runs the batches), the mapping of the
// engine's coded errors to gRPC statuses (grpcError, the one place), the
// transport's options and limits (message sizes, keepalive, the codec, the
// tap handle that ends a stuck stream), otelgrpc's stats handler, health,
// reflection, and Serve/Shutdown of the grpc.Server.
//
// Import rules: service may import engine, tools and gRPC; it holds no
// batch or call logic of its own (that belongs in engine, shared by every
// surface), and engine must never import it.
package grpcserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// Server implements toolwire.v1.ToolService over an engine: the gRPC
// surface of toolwire.
type Server struct {
	toolwirev1.UnimplementedToolServiceServer

	cfg    Config // its defaults filled in
	reg    *tools.Registry
	engine *engine.Engine
	log    *slog.Logger // the engine's
	health *health.Server
	conns  *connSet // what Serve accepted; see conns.go

	mu      sync.Mutex
	servers []*grpc.Server // what Register registered on; Shutdown stops them
}

var _ toolwirev1.ToolServiceServer = (*Server)(nil)

// New returns the gRPC surface of eng, serving the tools of reg. eng is
// made by the caller (engine.New, with its settings and its telemetry) and
// may be shared with other surfaces; the surface logs on eng's logger.
// Shutdown drains eng, since a process stops its surfaces together
// (draining twice is harmless); closing eng is its maker's job, once every
// surface on it has stopped. Every surface has this shape: New(engine,
// registry, its options) (*Server, error), and Shutdown().
func New(eng *engine.Engine, reg *tools.Registry, cfg Config) (*Server, error) {
	ec := eng.Config()
	s := &Server{
		cfg:    cfg.withDefaults(ec.MaxCallTimeout),
		reg:    reg,
		engine: eng,
		log:    eng.Logger(),
		health: health.NewServer(),
	}
	s.conns = newConnSet(s.log, unaryWatch{timeout: ec.SendTimeout, budget: int64(ec.MaxBufferedBytes), tick: 250 * time.Millisecond, stall: 500 * time.Millisecond,
		cap: 2 * int64(max(ec.MaxBufferedBytes, eng.ListLimit()))}) // two of the largest listing
	s.health.SetServingStatus(toolwirev1.ToolService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Register registers the tool service, the standard health service and
// server reflection on gs, which Shutdown then stops.
func (s *Server) Register(gs *grpc.Server) {
	s.mu.Lock()
	s.servers = append(s.servers, gs)
	s.mu.Unlock()
	toolwirev1.RegisterToolServiceServer(gs, s)
	if s.cfg.Admin != nil {
		toolwirev1.RegisterAdminServiceServer(gs, adminServer{view: s.cfg.Admin})
	}
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
}

// RegisterHealth registers only the health service on gs: for a plaintext
// listener that probes which cannot speak TLS (kubelet's gRPC probes) can
// reach while the tool service itself requires TLS. It reports the same
// statuses, NOT_SERVING during shutdown included.
func (s *Server) RegisterHealth(gs *grpc.Server) {
	healthpb.RegisterHealthServer(gs, s.health)
}

// WatchTools implements toolwire.v1.ToolService.
func (s *Server) WatchTools(_ *toolwirev1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolwirev1.WatchToolsResponse]) error {
	ctx := stream.Context()
	release, err := s.engine.Watch(ctx) // per caller and in all
	if err != nil {
		return grpcError(err)
	}
	defer release()
	for snap := range s.reg.Watch(ctx, s.engine.Draining()) {
		if err := stream.Send(&toolwirev1.WatchToolsResponse{Revision: snap.Revision()}); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, "server is shutting down")
}

// ExecuteBatch implements toolwire.v1.ToolService.
func (s *Server) ExecuteBatch(req *toolwirev1.ExecuteBatchRequest, stream grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	ctx := withClientTrace(stream.Context())
	// The stream is the sink as it is (wrapping it would cost an
	// allocation); its context, made by the tap handle, holds the Stopper
	// that ends a stuck Send (tap.go).
	return grpcError(s.engine.Run(ctx, s.reg.Snapshot(), req, stream))
}

// AttachBatch implements toolwire.v1.ToolService: a detached batch's events
// after a seq, then its live ones (Engine.Attach). The stream's end only
// detaches this reader.
func (s *Server) AttachBatch(req *toolwirev1.AttachBatchRequest, stream grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	return grpcError(s.engine.Attach(stream.Context(), req.GetBatchId(), req.GetAfterSeq(), stream))
}

// GetBatch implements toolwire.v1.ToolService (Engine.GetBatch).
func (s *Server) GetBatch(ctx context.Context, req *toolwirev1.GetBatchRequest) (*toolwirev1.GetBatchResponse, error) {
	resp, err := s.engine.GetBatch(ctx, req.GetBatchId())
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// ResolveApproval implements toolwire.v1.ToolService (Engine.ResolveApproval).
func (s *Server) ResolveApproval(ctx context.Context, req *toolwirev1.ResolveApprovalRequest) (*toolwirev1.ResolveApprovalResponse, error) {
	if err := s.engine.ResolveApproval(ctx, req.GetBatchId(), req.GetCallId(), req.GetApproved(), req.GetMessage(), req.GetApprover()); err != nil {
		return nil, grpcError(err)
	}
	return &toolwirev1.ResolveApprovalResponse{}, nil
}

// CancelBatch implements toolwire.v1.ToolService (Engine.Cancel).
func (s *Server) CancelBatch(ctx context.Context, req *toolwirev1.CancelBatchRequest) (*toolwirev1.CancelBatchResponse, error) {
	if err := s.engine.Cancel(ctx, req.GetBatchId(), req.GetReason()); err != nil {
		return nil, grpcError(err)
	}
	return &toolwirev1.CancelBatchResponse{}, nil
}

// grpcError maps an error of the engine's to its gRPC status, in this one
// place: an *engine.Error becomes the status of the code of the same name
// and its message; anything else (a stream's own error, already a status)
// passes as it is.
func grpcError(err error) error {
	e, ok := err.(*engine.Error) // Run returns them unwrapped; errors.As would allocate
	if !ok {
		return err
	}
	st := status.New(grpcCode(e.Code), e.Message)
	if ds := e.Details(); len(ds) > 0 {
		v1 := make([]protoadapt.MessageV1, len(ds))
		for i, d := range ds {
			v1[i] = protoadapt.MessageV1Of(d)
		}
		if with, err := st.WithDetails(v1...); err == nil {
			st = with
		}
	}
	return st.Err()
}

// grpcCode is the gRPC code of c; a code this surface does not know is
// Unknown, never OK, so an error never reads as success.
func grpcCode(c engine.Code) codes.Code {
	if g, ok := grpcCodes[c.String()]; ok && c != engine.OK {
		return g
	}
	return codes.Unknown
}

// grpcCodes are gRPC's codes by their names, which the engine's codes
// share (Code.String).
var grpcCodes = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = c
	}
	return m
}()

// ListenAndServe listens on the configured address and serves; see Serve.
func (s *Server) ListenAndServe(ctx context.Context, opts ...grpc.ServerOption) error {
	lis, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return err
	}
	s.log.Info("toolwire listening on "+lis.Addr().String(), "addr", lis.Addr().String())
	return s.Serve(ctx, lis, opts...)
}

// Serve serves on lis until ctx is done, then shuts down gracefully: health
// turns NOT_SERVING, new batches are refused, running batches get
// DrainTimeout to finish, then their calls are cancelled (and still get
// results), then the gRPC server stops, forcibly if it must. The server's
// TelemetryOptions and ServerOptions come before opts. It keeps the
// connections it accepts, at most MaxConnections at once, to close those
// whose clients leave the most streams unread once such streams pile up
// (see conns.go).
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	// Its connections are kept (conns.go), and its unary responses noted
	// on them (unary.go).
	gs := grpc.NewServer(append(append(s.TelemetryOptions(), append(s.ServerOptions(), grpc.ChainUnaryInterceptor(s.conns.noteUnary))...), opts...)...)
	s.Register(gs)
	errc := make(chan error, 1)
	lis = s.conns.listen(lis, s.cfg.MaxConnections)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Shutdown()
	// A shutdown that came before gs.Serve began makes it return
	// ErrServerStopped: the stop asked for, not a failure.
	if err := <-errc; !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// StopGrace is how long Shutdown lets a gRPC server stop gracefully, once
// the engine has drained, before it stops it forcibly.
const StopGrace = 5 * time.Second

// Shutdown turns health NOT_SERVING, drains the engine, and stops every
// grpc.Server the surface was registered on (Serve's among them):
// gracefully, then forcibly after StopGrace; see Serve. Calling it again
// is harmless.
func (s *Server) Shutdown() {
	s.health.Shutdown()
	s.engine.Drain()
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, gs := range servers {
		wg.Go(func() {
			stopped := make(chan struct{})
			go func() { gs.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(StopGrace):
				gs.Stop()
				<-stopped
			}
		})
	}
	wg.Wait()
}
