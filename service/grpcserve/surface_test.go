package grpcserve_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestSurface runs the behaviour suite every surface passes against the
// gRPC surface: a real server (Serve, with service/auth's bearer tokens)
// on a loopback port, driven by a client over TCP.
func TestSurface(t *testing.T) {
	t.Parallel()
	surfacetest.Run(t, newGRPCSurface)
}

// grpcSurface is the suite's adapter for the gRPC surface. It lacks
// nothing: ExecuteBatch carries batches, their options, call timeouts,
// idempotency keys and session IDs; the RPC's deadline reaches the server;
// cancelling the RPC cancels the batch; results carry every field; the
// transport has a message limit (MaxMessageBytes). Call is the unary
// CallTool.
type grpcSurface struct {
	client toolwirev1.ToolServiceClient
}

func newGRPCSurface(t *testing.T, cfg surfacetest.Config) surfacetest.Surface {
	t.Helper()
	var tokens []auth.Token
	for _, c := range cfg.Callers {
		tokens = append(tokens, auth.Token{Name: c.Name, Hash: auth.HashToken(c.Token)})
	}
	v, err := auth.New(auth.Config{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcserve.New(cfg.Engine, cfg.Registry, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, grpcauth.Interceptors(v, slog.New(slog.DiscardHandler))...) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return &grpcSurface{client: toolwirev1.NewToolServiceClient(conn)}
}

// withCaller returns ctx carrying caller's bearer token, if it has one.
func withCaller(ctx context.Context, caller surfacetest.Caller) context.Context {
	if caller.Token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+caller.Token)
}

func (s *grpcSurface) Tools(ctx context.Context, caller surfacetest.Caller) ([]*toolwirev1.Tool, error) {
	resp, err := s.client.ListTools(withCaller(ctx, caller), &toolwirev1.ListToolsRequest{})
	return resp.GetTools(), err
}

func (s *grpcSurface) Batch(ctx context.Context, caller surfacetest.Caller, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error) {
	stream, err := s.client.ExecuteBatch(withCaller(ctx, caller), req)
	if err != nil {
		return nil, err
	}
	var events []*toolwirev1.ExecuteBatchResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events = append(events, ev)
	}
}

func (s *grpcSurface) Call(ctx context.Context, caller surfacetest.Caller, sessionID string, call *toolwirev1.ToolCall) (*toolwirev1.CallResult, error) {
	resp, err := s.client.CallTool(withCaller(ctx, caller), &toolwirev1.CallToolRequest{Call: call, SessionId: sessionID})
	return resp.GetResult(), err
}

func (s *grpcSurface) Code(err error) surfacetest.Code {
	switch status.Code(err) {
	case codes.OK:
		return surfacetest.OK
	case codes.Canceled:
		return surfacetest.Canceled
	case codes.InvalidArgument:
		return surfacetest.InvalidArgument
	case codes.DeadlineExceeded:
		return surfacetest.DeadlineExceeded
	case codes.ResourceExhausted:
		return surfacetest.ResourceExhausted
	case codes.Unavailable:
		return surfacetest.Unavailable
	case codes.Unauthenticated:
		return surfacetest.Unauthenticated
	case codes.Internal:
		return surfacetest.Internal
	case codes.NotFound:
		return surfacetest.NotFound
	case codes.PermissionDenied:
		return surfacetest.PermissionDenied
	case codes.Aborted:
		return surfacetest.Aborted
	}
	return surfacetest.Unknown
}

func (s *grpcSurface) Start(ctx context.Context, caller surfacetest.Caller, req *toolwirev1.ExecuteBatchRequest) (*toolwirev1.ExecuteBatchResponse, func() ([]*toolwirev1.ExecuteBatchResponse, error), error) {
	ctx, cancel := context.WithCancel(withCaller(ctx, caller))
	stream, err := s.client.ExecuteBatch(ctx, req)
	if err == nil {
		var first *toolwirev1.ExecuteBatchResponse
		if first, err = stream.Recv(); err == nil {
			return first, func() ([]*toolwirev1.ExecuteBatchResponse, error) {
				cancel()
				var more []*toolwirev1.ExecuteBatchResponse
				for {
					ev, err := stream.Recv()
					if err != nil {
						return more, err
					}
					more = append(more, ev)
				}
			}, nil
		}
	}
	cancel()
	return nil, nil, err
}

func (s *grpcSurface) Attach(ctx context.Context, caller surfacetest.Caller, batchID string, afterSeq uint64) ([]*toolwirev1.ExecuteBatchResponse, error) {
	stream, err := s.client.AttachBatch(withCaller(ctx, caller), &toolwirev1.AttachBatchRequest{BatchId: batchID, AfterSeq: afterSeq})
	if err != nil {
		return nil, err
	}
	var events []*toolwirev1.ExecuteBatchResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events = append(events, ev)
	}
}

func (s *grpcSurface) Get(ctx context.Context, caller surfacetest.Caller, batchID string) (*toolwirev1.GetBatchResponse, error) {
	return s.client.GetBatch(withCaller(ctx, caller), &toolwirev1.GetBatchRequest{BatchId: batchID})
}

func (s *grpcSurface) CancelBatch(ctx context.Context, caller surfacetest.Caller, batchID, reason string) error {
	_, err := s.client.CancelBatch(withCaller(ctx, caller), &toolwirev1.CancelBatchRequest{BatchId: batchID, Reason: reason})
	return err
}

func (s *grpcSurface) Lacks() surfacetest.Lacks { return surfacetest.Lacks{} }
