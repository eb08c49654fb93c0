package connectserve_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/service/connectserve"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
)

// TestSurface runs the behaviour suite every surface passes against the
// Connect surface as serve mounts it (the HTTP port, httpserve, with the
// shared auth middleware in front) on a loopback port, driven by the
// generated Connect client in each protocol the port speaks: Connect with
// binary and with JSON messages and gRPC-Web over HTTP/1.1, as browsers
// and curl call it, and gRPC over h2c.
func TestSurface(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			surfacetest.Run(t, func(t *testing.T, cfg surfacetest.Config) surfacetest.Surface {
				return newConnectSurface(t, cfg, p)
			})
		})
	}
}

// protocol is a way the generated client calls the port.
type protocol struct {
	name string
	h2c  bool // HTTP/2 without TLS; HTTP/1.1 otherwise
	opts []connect.ClientOption
}

var protocols = []protocol{
	{name: "connect+proto"},
	{name: "connect+json", opts: []connect.ClientOption{connect.WithProtoJSON()}},
	{name: "grpc-web", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	{name: "grpc-h2c", h2c: true, opts: []connect.ClientOption{connect.WithGRPC()}},
}

// connectSurface is the suite's adapter for the Connect surface. It lacks
// nothing: ExecuteBatch carries batches and their options; CallTool a call
// with its timeout, idempotency key and session; the client's deadline
// travels as Connect-Timeout-Ms (grpc-timeout for gRPC and gRPC-Web);
// cancelling the request cancels the call; the surface bounds a message by
// the engine's MaxMessageBytes. Call is the unary CallTool.
type connectSurface struct {
	client toolwirev1connect.ToolServiceClient
}

// serveSurface serves the Connect surface of cfg's engine as cmd/toolwire
// does, on a loopback port, until the test ends, and returns its URL.
func serveSurface(t testing.TB, eng *engine.Engine, reg *tools.Registry, callers []surfacetest.Caller, hc httpserve.Config) string {
	t.Helper()
	var tokens []auth.Token
	for _, c := range callers {
		tokens = append(tokens, auth.Token{Name: c.Name, Hash: auth.HashToken(c.Token)})
	}
	v, err := auth.New(auth.Config{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := connectserve.New(eng, reg, connectserve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	port := httpserve.New(hc, nil, log)
	port.Handle(connectserve.Path, auth.RequireCredentials(v, log)(srv), nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- port.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		srv.Shutdown()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + lis.Addr().String()
}

// httpClient is a client of the port in p's HTTP version, its connections
// closed when the test ends.
func httpClient(t testing.TB, h2c bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func newConnectSurface(t *testing.T, cfg surfacetest.Config, p protocol) surfacetest.Surface {
	t.Helper()
	url := serveSurface(t, cfg.Engine, cfg.Registry, cfg.Callers, httpserve.Config{})
	return &connectSurface{client: toolwirev1connect.NewToolServiceClient(httpClient(t, p.h2c), url, p.opts...)}
}

// request is msg as caller sends it: with its bearer token, if it has one.
func request[T any](caller surfacetest.Caller, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if caller.Token != "" {
		req.Header().Set("Authorization", "Bearer "+caller.Token)
	}
	return req
}

func (s *connectSurface) Tools(ctx context.Context, caller surfacetest.Caller) ([]*toolwirev1.Tool, error) {
	resp, err := s.client.ListTools(ctx, request(caller, &toolwirev1.ListToolsRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetTools(), nil
}

func (s *connectSurface) Batch(ctx context.Context, caller surfacetest.Caller, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error) {
	stream, err := s.client.ExecuteBatch(ctx, request(caller, req))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var events []*toolwirev1.ExecuteBatchResponse
	for stream.Receive() {
		events = append(events, stream.Msg())
	}
	return events, stream.Err()
}

func (s *connectSurface) Call(ctx context.Context, caller surfacetest.Caller, sessionID string, call *toolwirev1.ToolCall) (*toolwirev1.CallResult, error) {
	resp, err := s.client.CallTool(ctx, request(caller, &toolwirev1.CallToolRequest{Call: call, SessionId: sessionID}))
	if err != nil {
		return nil, err
	}
	if resp.Msg.GetResult() == nil {
		return nil, errors.New("CallTool answered without a result")
	}
	return resp.Msg.GetResult(), nil
}

func (s *connectSurface) Code(err error) surfacetest.Code {
	if err == nil {
		return surfacetest.OK
	}
	switch connect.CodeOf(err) {
	case connect.CodeCanceled:
		return surfacetest.Canceled
	case connect.CodeInvalidArgument:
		return surfacetest.InvalidArgument
	case connect.CodeDeadlineExceeded:
		return surfacetest.DeadlineExceeded
	case connect.CodeResourceExhausted:
		return surfacetest.ResourceExhausted
	case connect.CodeUnavailable:
		return surfacetest.Unavailable
	case connect.CodeUnauthenticated:
		return surfacetest.Unauthenticated
	case connect.CodeInternal:
		return surfacetest.Internal
	case connect.CodeNotFound:
		return surfacetest.NotFound
	case connect.CodePermissionDenied:
		return surfacetest.PermissionDenied
	case connect.CodeAborted:
		return surfacetest.Aborted
	}
	return surfacetest.Unknown
}

func (s *connectSurface) Start(ctx context.Context, caller surfacetest.Caller, req *toolwirev1.ExecuteBatchRequest) (*toolwirev1.ExecuteBatchResponse, func() ([]*toolwirev1.ExecuteBatchResponse, error), error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.client.ExecuteBatch(ctx, request(caller, req))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if !stream.Receive() {
		cancel()
		err := stream.Err()
		stream.Close()
		return nil, nil, err
	}
	first := stream.Msg()
	return first, func() ([]*toolwirev1.ExecuteBatchResponse, error) {
		cancel()
		defer stream.Close()
		var more []*toolwirev1.ExecuteBatchResponse
		for stream.Receive() {
			more = append(more, stream.Msg())
		}
		return more, stream.Err()
	}, nil
}

func (s *connectSurface) Attach(ctx context.Context, caller surfacetest.Caller, batchID string, afterSeq uint64) ([]*toolwirev1.ExecuteBatchResponse, error) {
	stream, err := s.client.AttachBatch(ctx, request(caller, &toolwirev1.AttachBatchRequest{BatchId: batchID, AfterSeq: afterSeq}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var events []*toolwirev1.ExecuteBatchResponse
	for stream.Receive() {
		events = append(events, stream.Msg())
	}
	return events, stream.Err()
}

func (s *connectSurface) Get(ctx context.Context, caller surfacetest.Caller, batchID string) (*toolwirev1.GetBatchResponse, error) {
	resp, err := s.client.GetBatch(ctx, request(caller, &toolwirev1.GetBatchRequest{BatchId: batchID}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func (s *connectSurface) CancelBatch(ctx context.Context, caller surfacetest.Caller, batchID, reason string) error {
	_, err := s.client.CancelBatch(ctx, request(caller, &toolwirev1.CancelBatchRequest{BatchId: batchID, Reason: reason}))
	return err
}

func (s *connectSurface) Lacks() surfacetest.Lacks { return surfacetest.Lacks{} }
