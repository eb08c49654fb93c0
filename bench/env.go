package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/service/connectserve"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/service/mcpserve"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// env is what every measurement runs against, each over loopback TCP with
// its own client: toolwire's gRPC server, a bare gRPC server offering a
// unary echo (the floor), and an MCP server over streamable HTTP, whose
// echo toolwire's MCP gateway also offers (as mcp_echo).
type env struct {
	floor     *grpc.Server // bare gRPC: the unary echo alone
	floorConn *grpc.ClientConn
	unary     testpb.TestServiceClient

	stopTW func() // ends toolwire's Serve and waits for it
	eng    *engine.Engine
	srv    *grpcserve.Server
	conn   *grpc.ClientConn
	tw     toolwirev1.ToolServiceClient

	httpSrv *http.Server
	mcpURL  string
	mcp     *mcp.ClientSession
	stdio   *mcp.ClientSession // the same echo served over stdio by a child process
	gw      *mcpsource.Gateway // offers both MCP servers' tools in toolwire's registry

	// toolwire's own MCP surface (/mcp) on the engine of srv, and a go-sdk
	// client of it speaking 2026-07-28.
	surface    *mcpserve.Server
	surfaceSrv *http.Server
	surfaceMCP *mcp.ClientSession

	// supergateway in front of the stdio MCP server, when the run has it
	// (supergateway.go): --stateful, and as its README starts it.
	sgStateful, sgDefault *supergateway

	// toolwire's Connect surface on the same engine, on the HTTP port as
	// serve runs it (httpserve), and a generated Connect client of it
	// (the Connect protocol, binary, over HTTP/1.1).
	stopPort  context.CancelFunc
	portDone  chan error
	connectTW toolwirev1connect.ToolServiceClient
	connectHC *http.Client

	// block's calls: how many have entered it, and when each one's context
	// ended (sent only while someone listens).
	entered atomic.Int64
	blocked atomic.Int64 // block's calls not yet returned
	ctxDone atomic.Pointer[chan time.Time]
	// When ExecuteBatch handlers return (sent only while someone listens).
	closed  atomic.Pointer[chan time.Time]
	streams atomic.Int64 // ExecuteBatch handlers running
}

const echoArgs = `{"text":"hello"}`

type unaryEcho struct {
	testpb.UnimplementedTestServiceServer
}

func (unaryEcho) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func newEnv(ctx context.Context) (_ *env, err error) {
	e := &env{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	reg, err := tools.NewRegistry(append(diag.Tools(), e.benchTools()...)...)
	if err != nil {
		return nil, err
	}
	e.eng = engine.New(engine.Config{
		// Lanes are bounded by the batch, not the server, and the in-flight
		// measurement holds 10,000 one-call batches at once.
		MaxParallel:          1024,
		MaxConcurrentBatches: 20000,
		// Past the server's slots the in-flight measurement's calls would
		// queue, never all entering the tool.
		MaxConcurrentCalls: 20000,
	}, engine.Deps{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	// The in-flight measurement's 10,000 streams share one connection.
	if e.srv, err = grpcserve.New(e.eng, reg, grpcserve.Config{Limits: grpcserve.Limits{MaxConcurrentStreams: 20000}}); err != nil {
		return nil, err
	}
	// toolwire served by Serve, as serve's gRPC port is (its options,
	// telemetry and limits, its connections kept and its unary responses
	// watched); the floor is a bare gRPC server with nothing added.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	serveCtx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(serveCtx, lis, grpc.ChainStreamInterceptor(e.noteClose)) }()
	e.stopTW = func() { cancel(); <-served }
	if e.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, err
	}
	e.tw = toolwirev1.NewToolServiceClient(e.conn)
	e.floor = grpc.NewServer()
	testpb.RegisterTestServiceServer(e.floor, unaryEcho{})
	if e.floorConn, err = serve(e.floor); err != nil {
		return nil, err
	}
	e.unary = testpb.NewTestServiceClient(e.floorConn)

	if err := e.startMCP(ctx); err != nil {
		return nil, err
	}
	if err := e.startStdio(ctx); err != nil {
		return nil, err
	}
	if err := e.startGateway(ctx, reg); err != nil {
		return nil, err
	}
	if err := e.startSurface(ctx, reg); err != nil {
		return nil, err
	}
	if err := e.startConnect(reg); err != nil {
		return nil, err
	}
	return e, nil
}

// startGateway has toolwire's MCP gateway offer the echo of the MCP
// server over streamable HTTP in reg, as mcp_echo, and that of a second
// process of the stdio MCP server, as stdio_echo, and waits until it does.
func (e *env) startGateway(ctx context.Context, reg *tools.Registry) error {
	exe, err := stdioCommand()
	if err != nil {
		return err
	}
	e.gw = mcpsource.New(reg, nil)
	if err := e.gw.Sync(ctx, []mcpsource.ServerConfig{
		{Name: "mcp", URL: e.mcpURL},
		{Name: "stdio", Command: exe, Env: map[string]string{stdioEnv: "1", "GODEBUG": stdioDebug}},
	}); err != nil {
		return err
	}
	limit := time.After(30 * time.Second)
	for {
		changed := reg.Changed()
		snap := reg.Snapshot()
		_, http := snap.Lookup(gatewayTool)
		_, stdio := snap.Lookup(gatewayStdioTool)
		if http && stdio {
			return nil
		}
		select {
		case <-changed:
		case <-limit:
			return errors.New("the MCP gateway did not offer " + gatewayTool + " and " + gatewayStdioTool + " within 30s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// gatewayTool is the MCP server's echo as the gateway offers it.
const gatewayTool = "mcp_echo"

// serve serves gs on a loopback port and returns a client connection to it.
func serve(gs *grpc.Server) (*grpc.ClientConn, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = gs.Serve(lis) }()
	return grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// startMCP serves the echo tool with the MCP go-sdk over streamable HTTP,
// stateless with JSON responses (its fastest mode), and connects a client.
func (e *env) startMCP(ctx context.Context) error {
	server := echoServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e.httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	e.mcpURL = "http://" + lis.Addr().String()
	go func() { _ = e.httpSrv.Serve(lis) }()
	// Enough idle connections for every caller, or the client would reopen
	// TCP connections and measure that instead.
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	e.mcp, err = mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: e.mcpURL, HTTPClient: client, DisableStandaloneSSE: true}, nil)
	return err
}

// startSurface serves toolwire's /mcp on the engine toolwire's gRPC
// server runs, and connects a go-sdk client as the MCP server's is
// connected (the newest revision, 2026-07-28: stateless).
func (e *env) startSurface(ctx context.Context, reg *tools.Registry) error {
	var err error
	if e.surface, err = mcpserve.New(e.eng, reg, mcpserve.Options{}); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", e.surface)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e.surfaceSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.surfaceSrv.Serve(lis) }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	e.surfaceMCP, err = mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + lis.Addr().String() + "/mcp", HTTPClient: client, DisableStandaloneSSE: true}, nil)
	return err
}

// startConnect serves toolwire's Connect surface on the engine toolwire's
// gRPC server runs, on an HTTP port of its own, and makes a Connect client
// of it.
func (e *env) startConnect(reg *tools.Registry) error {
	srv, err := connectserve.New(e.eng, reg, connectserve.Options{})
	if err != nil {
		return err
	}
	port := httpserve.New(httpserve.Config{}, nil, nil)
	port.Handle(connectserve.Path, srv, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	e.stopPort, e.portDone = stop, make(chan error, 1)
	go func() { e.portDone <- port.Serve(ctx, lis) }()
	e.connectHC = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	e.connectTW = toolwirev1connect.NewToolServiceClient(e.connectHC, "http://"+lis.Addr().String())
	return nil
}

func (e *env) close() {
	e.sgStateful.stop()
	e.sgDefault.stop()
	if e.stopPort != nil {
		e.connectHC.CloseIdleConnections()
		e.stopPort()
		<-e.portDone
	}
	if e.surfaceMCP != nil {
		_ = e.surfaceMCP.Close()
	}
	if e.surfaceSrv != nil {
		_ = e.surfaceSrv.Close()
	}
	if e.surface != nil {
		e.surface.Close()
	}
	if e.gw != nil {
		_ = e.gw.Close()
	}
	if e.mcp != nil {
		_ = e.mcp.Close()
	}
	if e.stdio != nil {
		_ = e.stdio.Close()
	}
	if e.httpSrv != nil {
		_ = e.httpSrv.Close()
	}
	for _, c := range []*grpc.ClientConn{e.conn, e.floorConn} {
		if c != nil {
			_ = c.Close()
		}
	}
	if e.floor != nil {
		e.floor.Stop()
	}
	if e.stopTW != nil {
		e.stopTW()
	}
	if e.eng != nil {
		e.eng.Close()
	}
}

// benchTools are the tools the measurements need beyond diag's: an unsafe
// sleep, and block, which waits for its context and reports when it ends.
func (e *env) benchTools() []tools.Tool {
	sleepUnsafe := diag.Tools()[1]
	sleepUnsafe.Name = "sleep_unsafe"
	sleepUnsafe.Annotations = tools.Annotations{}
	return []tools.Tool{sleepUnsafe, {
		Name:        "block",
		Description: "Waits until the call is cancelled or times out.",
		InputSchema: []byte(`{"type":"object"}`),
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			e.entered.Add(1)
			e.blocked.Add(1)
			defer e.blocked.Add(-1)
			<-ctx.Done()
			if ch := e.ctxDone.Load(); ch != nil {
				*ch <- time.Now()
			}
			return nil, ctx.Err()
		},
	}}
}

// noteClose reports when an ExecuteBatch handler returns: the server's end
// of the stream is closed.
func (e *env) noteClose(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	e.streams.Add(1)
	defer e.streams.Add(-1)
	err := handler(srv, ss)
	if ch := e.closed.Load(); ch != nil {
		*ch <- time.Now()
	}
	return err
}

// quiesce waits until no block call and no ExecuteBatch handler is left
// over from an earlier measurement, whose clients may have gone before the
// server's end finished.
func (e *env) quiesce(ctx context.Context) error {
	for e.blocked.Load() > 0 || e.streams.Load() > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

func (e *env) unaryEcho(ctx context.Context) error {
	_, err := e.unary.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(echoArgs)}})
	return err
}

func (e *env) toolwireEcho(ctx context.Context) error {
	_, err := e.batch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: echoArgs}}})
	return err
}

// callToolEcho calls echo with CallTool, toolwire's unary fast path.
func (e *env) callToolEcho(ctx context.Context) error {
	resp, err := e.tw.CallTool(ctx, &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: "echo", Arguments: echoArgs}})
	if err == nil && resp.GetResult().GetIsError() {
		err = errors.New("call failed: " + resp.GetResult().String())
	}
	return err
}

// connectEcho calls echo with CallTool over the Connect protocol.
func (e *env) connectEcho(ctx context.Context) error {
	resp, err := e.connectTW.CallTool(ctx, connect.NewRequest(&toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: "echo", Arguments: echoArgs}}))
	if err == nil && resp.Msg.GetResult().GetIsError() {
		err = errors.New("call failed: " + resp.Msg.GetResult().String())
	}
	return err
}

// gatewayEcho calls the MCP server's echo through toolwire: a one-call
// batch of the tool the gateway forwards to it.
func (e *env) gatewayEcho(ctx context.Context) error {
	_, err := e.batch(ctx, oneCall(gatewayTool))
	return err
}

// oneCall is a batch of one call of tool with echo's arguments.
func oneCall(tool string) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: tool, Arguments: echoArgs}}}
}

// surfaceEcho calls echo through toolwire's /mcp.
func (e *env) surfaceEcho(ctx context.Context) error {
	return mcpCall(ctx, e.surfaceMCP, "echo")
}

func (e *env) mcpEcho(ctx context.Context) error {
	return mcpCall(ctx, e.mcp, "echo")
}

// mcpCall calls tool with echo's arguments through cs; an error result is
// an error.
func mcpCall(ctx context.Context, cs *mcp.ClientSession, tool string) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hello"}})
	if err == nil && res.IsError {
		err = fmt.Errorf("MCP call of %s returned an error result: %s", tool, errorText(res))
	}
	return err
}

// batch runs req to the end and returns its results; an error result is an
// error unless the call was meant to fail.
func (e *env) batch(ctx context.Context, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.CallResult, error) {
	stream, err := e.tw.ExecuteBatch(ctx, req)
	if err != nil {
		return nil, err
	}
	var results []*toolwirev1.CallResult
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return results, nil
		}
		if err != nil {
			return results, err
		}
		if r := ev.GetResult(); r != nil {
			if r.GetIsError() {
				return results, errors.New("call failed: " + r.String())
			}
			results = append(results, r)
		}
	}
}

// errorText is the text of an MCP error result.
func errorText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}
