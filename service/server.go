// Package service is toolwire's gRPC server: it checks batches, plans them
// into lanes, runs each call under its deadline with cancellation, panic
// recovery and output caps, and streams the events through one writer.
package service

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Server implements toolwire.v1.ToolService over a tool registry.
type Server struct {
	toolwirev1.UnimplementedToolServiceServer

	cfg    Config
	reg    *tools.Registry
	health *health.Server

	mu       sync.Mutex
	draining bool
	cancels  map[*batch]context.CancelCauseFunc // running batches; at most MaxConcurrentBatches
	active   sync.WaitGroup                     // running batches
	stopping chan struct{}                      // closed when shutdown begins
	watching bool                               // watchSends is running

	abandoned atomic.Int64
	runners   *runners
	limits    *limiter
	tel       *telemetry
}

var _ toolwirev1.ToolServiceServer = (*Server)(nil)

// New returns a server for the tools in reg.
func New(reg *tools.Registry, cfg Config) *Server {
	s := &Server{
		cfg:      cfg.withDefaults(),
		reg:      reg,
		health:   health.NewServer(),
		cancels:  make(map[*batch]context.CancelCauseFunc),
		stopping: make(chan struct{}),
		runners:  newRunners(10 * time.Second),
	}
	perCaller, anonymous := s.cfg.callerShare()
	s.limits = newLimiter(s.cfg.MaxConcurrentCalls, perCaller, anonymous)
	s.tel = newTelemetry(&s.cfg)
	s.health.SetServingStatus(toolwirev1.ToolService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// Register registers the tool service, the standard health service and
// server reflection on gs.
func (s *Server) Register(gs *grpc.Server) {
	toolwirev1.RegisterToolServiceServer(gs, s)
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

// Abandoned returns how many tools were abandoned for ignoring cancellation.
func (s *Server) Abandoned() int64 { return s.abandoned.Load() }

// ListTools implements toolwire.v1.ToolService.
func (s *Server) ListTools(ctx context.Context, _ *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	snap := s.reg.Snapshot()
	resp := &toolwirev1.ListToolsResponse{Revision: snap.Revision(), Tools: make([]*toolwirev1.Tool, 0, snap.Len())}
	for _, t := range snap.Tools() {
		if !s.permits(ctx, t.Name) {
			continue
		}
		resp.Tools = append(resp.Tools, ToolProto(t))
	}
	return resp, nil
}

// ToolProto returns the declaration of t.
func ToolProto(t *tools.Tool) *toolwirev1.Tool {
	p := &toolwirev1.Tool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  t.Description,
		InputSchema:  string(t.InputSchema),
		OutputSchema: string(t.OutputSchema),
		Annotations: &toolwirev1.ToolAnnotations{
			ReadOnly:    t.Annotations.ReadOnly,
			Destructive: t.Annotations.Destructive,
			Idempotent:  t.Annotations.Idempotent,
			OpenWorld:   t.Annotations.OpenWorld,
		},
		Source: toolwirev1.ToolSource(t.Source),
	}
	if t.Timeout > 0 {
		p.Timeout = durationpb.New(t.Timeout)
	}
	return p
}

// WatchTools implements toolwire.v1.ToolService.
func (s *Server) WatchTools(_ *toolwirev1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolwirev1.WatchToolsResponse]) error {
	last := ""
	for {
		changed := s.reg.Changed() // before the snapshot, so no change is missed
		if rev := s.reg.Snapshot().Revision(); rev != last {
			if err := stream.Send(&toolwirev1.WatchToolsResponse{Revision: rev}); err != nil {
				return err
			}
			last = rev
		}
		select {
		case <-changed:
		case <-s.stopping:
			return status.Error(codes.Unavailable, "server is shutting down")
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

// ExecuteBatch implements toolwire.v1.ToolService.
func (s *Server) ExecuteBatch(req *toolwirev1.ExecuteBatchRequest, stream grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) (err error) {
	if err := s.checkBatch(req); err != nil {
		return err
	}
	ctx := withClientTrace(stream.Context())
	b := s.newBatch(ctx, req)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := s.admit(b, cancel); err != nil {
		return err
	}
	defer s.release(b)
	runCtx = b.startTelemetry(runCtx)
	defer func() { b.endTelemetry(err); b.logBatch(err) }()
	if d := req.GetOptions().GetTimeout(); d != nil && d.AsDuration() > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeoutCause(runCtx, d.AsDuration(), errBatchTimeout)
		defer cancelTimeout()
	}
	if err := b.reserve(runCtx); err != nil {
		return err
	}
	defer b.dropReserved()
	s.runners.Go(func() { b.run(runCtx) })
	sendErr := b.write(stream, cancel)
	if b.timedOut.Load() {
		// The transport has already sent DEADLINE_EXCEEDED; this status is
		// for the server's own telemetry and logs.
		return status.Errorf(codes.DeadlineExceeded, "the client read nothing of the stream for %s; the server ended it and cancelled its calls", s.cfg.SendTimeout)
	}
	if sendErr != nil {
		return sendErr
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return stream.Send(b.finished())
}

// admit counts a batch in, keeping its cancel function for shutdown, or
// refuses it while shutting down or overloaded.
func (s *Server) admit(b *batch, cancel context.CancelCauseFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.draining:
		return status.Error(codes.Unavailable, "server is shutting down; retry on another replica")
	case len(s.cancels) >= s.cfg.MaxConcurrentBatches:
		return status.Errorf(codes.ResourceExhausted, "server is running its limit of %d batches; retry with backoff", s.cfg.MaxConcurrentBatches)
	}
	s.cancels[b] = cancel
	s.active.Add(1)
	if !s.watching {
		s.watching = true
		go s.watchSends()
	}
	return nil
}

func (s *Server) release(b *batch) {
	s.mu.Lock()
	delete(s.cancels, b)
	s.mu.Unlock()
	s.active.Done()
}

// stopCalls cancels the calls of every running batch; they still get
// results. Shutdown calls it when the drain timeout has passed.
func (s *Server) stopCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.cancels {
		cancel(errShutdown)
	}
}

// ListenAndServe listens on the configured address and serves; see Serve.
func (s *Server) ListenAndServe(ctx context.Context, opts ...grpc.ServerOption) error {
	lis, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return err
	}
	s.cfg.Logger.Info("toolwire listening on "+lis.Addr().String(), "addr", lis.Addr().String())
	return s.Serve(ctx, lis, opts...)
}

// Serve serves on lis until ctx is done, then shuts down gracefully: health
// turns NOT_SERVING, new batches are refused, running batches get
// DrainTimeout to finish, then their calls are cancelled (and still get
// results), then the gRPC server stops, forcibly if it must. The server's
// TelemetryOptions and ServerOptions come before opts.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	gs := grpc.NewServer(append(append(s.TelemetryOptions(), s.ServerOptions()...), opts...)...)
	s.Register(gs)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Shutdown(gs)
	return <-errc
}

// Shutdown drains and stops gs; see Serve.
func (s *Server) Shutdown(gs *grpc.Server) {
	s.health.Shutdown()
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		close(s.stopping)
	}
	s.mu.Unlock()

	drained := make(chan struct{})
	go func() { s.active.Wait(); close(drained) }()
	log := s.cfg.Logger
	select {
	case <-drained:
	case <-time.After(s.cfg.DrainTimeout):
		log.Warn("drain timeout passed; cancelling running calls", "drain_timeout", s.cfg.DrainTimeout)
		s.stopCalls()
		select {
		case <-drained:
		case <-time.After(s.cfg.AbandonGrace + 5*time.Second):
			log.Error("batches still running after cancellation; stopping anyway")
		}
	}

	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
		<-stopped
	}
	s.Close()
}

// Close lets the server's idle goroutines exit. Shutdown calls it; call it
// yourself after stopping a grpc.Server you registered the server on.
func (s *Server) Close() {
	s.runners.Close()
}

// safe reports whether calls of t may share a parallel lane.
func (s *Server) safe(t *tools.Tool) bool {
	if v, ok := s.cfg.Safe[t.Name]; ok {
		return v
	}
	return t.Annotations.ReadOnly
}

// newID returns a batch ID: unique enough for logs and traces, and cheap
// (no system call, unlike crypto/rand).
func newID() string {
	var b [16]byte
	return string(strconv.AppendUint(b[:0], rand.Uint64()|1<<63, 16))
}
