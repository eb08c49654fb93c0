// Package client is the Go client of toolwire. It lists tool declarations,
// executes batches of tool calls as an iterator of stream events, collects
// those events into results in batch order, runs single calls (CallTool), and converts between toolwire's
// messages and the tool formats of the OpenAI and Anthropic APIs, so an agent
// runtime can pass a model's tool calls to toolwire and its results back.
//
// It imports only the contract (gen/toolwire/v1), gRPC and OpenTelemetry:
// never engine/, service/, tools/, sources/ or store/, so a runtime that
// links it pulls in no server code.
package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Client talks to one toolwire server. It is safe for concurrent use.
type Client struct {
	conn     *grpc.ClientConn
	svc      toolwirev1.ToolServiceClient
	affinity bool // send the session in SessionHeader (WithSessionAffinity)

	rateRetries  int // see WithRateLimitRetries
	reattach     int // WithReattach's attempts; 0: none
	backoff      time.Duration
	pageSize     int32 // see WithListPageSize
	maxListBytes int   // see WithListLimits
	maxListPages int
}

// An Option configures a Client.
type Option func(*options)

type options struct {
	creds    credentials.TransportCredentials
	perRPC   credentials.PerRPCCredentials
	dialOpts []grpc.DialOption
	tel      telemetry
	affinity bool

	keepalive keepalive.ClientParameters

	rateRetries  int
	reattach     int
	backoff      time.Duration
	pageSize     int32
	maxListBytes int
	maxListPages int
}

// WithTransportCredentials sets the connection's transport security, such as
// credentials.NewTLS. By default the connection is insecure (plaintext),
// which suits a server on the same host or inside a service mesh.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = creds }
}

// WithPerRPCCredentials attaches credentials, such as a bearer token, to
// every RPC. By default no per-RPC credentials are sent. Credentials that
// require transport security need WithTransportCredentials too.
func WithPerRPCCredentials(creds credentials.PerRPCCredentials) Option {
	return func(o *options) { o.perRPC = creds }
}

// WithDialOptions appends gRPC dial options, for example
// grpc.WithContextDialer for in-memory connections or a stats handler for
// telemetry. They are applied after the options the other Options produce,
// so they win (grpc.WithKeepaliveParams over WithKeepalive). By default
// there are none.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// New returns a client for the server at target, in grpc.NewClient's syntax
// (for example "localhost:50051" or "dns:///toolwire.agents:50051"). It does
// not connect: the connection is made by the first RPC.
func New(target string, opts ...Option) (*Client, error) {
	o := options{
		creds:        insecure.NewCredentials(),
		rateRetries:  defaultRateLimitRetries,
		pageSize:     defaultPageSize,
		maxListBytes: defaultListBytes,
		maxListPages: defaultListPages,
		keepalive:    keepalive.ClientParameters{Time: defaultKeepaliveTime, Timeout: defaultKeepaliveTimeout},
	}
	for _, opt := range opts {
		opt(&o)
	}
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(o.creds)}
	if o.keepalive.Time > 0 {
		dialOpts = append(dialOpts, grpc.WithKeepaliveParams(o.keepalive))
	}
	if o.perRPC != nil {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(o.perRPC))
	}
	if opt := o.tel.dialOption(); opt != nil {
		dialOpts = append(dialOpts, opt)
	}
	dialOpts = append(dialOpts, o.dialOpts...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, svc: toolwirev1.NewToolServiceClient(conn), affinity: o.affinity, rateRetries: o.rateRetries, reattach: o.reattach, backoff: o.backoff, pageSize: o.pageSize, maxListBytes: o.maxListBytes, maxListPages: o.maxListPages}, nil
}

// Close closes the connection. RPCs in flight fail.
func (c *Client) Close() error {
	return c.conn.Close()
}

// ToolService returns the generated stub, for RPCs this package does not
// wrap, such as WatchTools.
func (c *Client) ToolService() toolwirev1.ToolServiceClient {
	return c.svc
}

// ExecuteBatch sends a batch and returns its events as they arrive:
// BatchAccepted, then CallStarted, CallProgress and CallResult events in
// completion order, then BatchFinished. An RPC error (a gRPC status error,
// see status.FromError) is yielded once as (nil, err) and ends the sequence;
// a failed call is not an RPC error but a CallResult with is_error set. A
// refusal that says when to retry (a rate limit's) is waited out and the
// batch sent again, up to WithRateLimitRetries times.
//
// The RPC starts when iteration starts; each iteration runs the batch again.
// The sequence ends after BatchFinished, the batch's last event: a server
// that holds the stream open after it is given a second, then the RPC is
// cancelled. Breaking out of the loop cancels the RPC, and with it the calls still
// running on the server (unless the batch is detached). CollectFor gathers
// the events into results in batch order, checked against req. With
// WithReattach, a detached batch's dropped stream is resumed with
// AttachBatch (see Attach).
func (c *Client) ExecuteBatch(ctx context.Context, req *toolwirev1.ExecuteBatchRequest, opts ...grpc.CallOption) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	if c.reattach > 0 && req.GetOptions().GetDetach() {
		ctx := c.withSession(ctx, req.GetSessionId())
		return c.follow(ctx, "", 0, func(ctx context.Context) (grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse], error) {
			return c.svc.ExecuteBatch(ctx, req, opts...)
		}, opts)
	}
	return func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		// Cancelling on return ends the stream whichever way the loop ends,
		// so neither the RPC nor gRPC's goroutine for it outlives the loop.
		ctx, cancel := context.WithCancel(c.withSession(ctx, req.GetSessionId()))
		defer cancel()
		for attempt := 0; ; attempt++ {
			stream, err := c.svc.ExecuteBatch(ctx, req, opts...)
			if err != nil {
				yield(nil, err)
				return
			}
			for first := true; ; first = false {
				ev, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					// Refused before BatchAccepted: nothing ran.
					if first && c.waitToRetry(ctx, err, attempt) {
						break
					}
					yield(nil, err)
					return
				}
				if !yield(ev, nil) {
					return
				}
				if ev.GetFinished() != nil {
					endStream(stream, cancel)
					return
				}
			}
		}
	}
}

// CallTool runs one call, req.Call, and returns its result: the unary
// fast path for a call that needs neither progress events nor the other
// calls of a batch. A failed call is not an error but a result with
// is_error set, as in a batch; an RPC error (a gRPC status error, see
// status.FromError) is what the runtime must fix, INVALID_ARGUMENT for a
// malformed call among them. Cancelling ctx cancels the call on the server.
// A refusal that says when to retry (a rate limit's) is waited out and the
// call sent again, up to WithRateLimitRetries times. A response without a
// result, or with another call's (call_id), is an INTERNAL error. A server
// without CallTool (UNIMPLEMENTED: one from before it, which a balancer
// can pick in a rolling upgrade) gets the call as a batch of one.
func (c *Client) CallTool(ctx context.Context, req *toolwirev1.CallToolRequest, opts ...grpc.CallOption) (*toolwirev1.CallResult, error) {
	sctx := c.withSession(ctx, req.GetSessionId())
	for attempt := 0; ; attempt++ {
		resp, err := c.svc.CallTool(sctx, req, opts...)
		if err == nil {
			return callResult(req, resp)
		}
		if status.Code(err) == codes.Unimplemented {
			// A server from before CallTool (met behind a balancer in a
			// rolling upgrade) has ExecuteBatch only: the call goes as a
			// batch of one, which runs it alike.
			return c.callAsBatch(ctx, req, opts...)
		}
		if !c.waitToRetry(sctx, err, attempt) {
			return nil, err
		}
	}
}

// callAsBatch runs req's call as a batch of one, for a server without
// CallTool.
func (c *Client) callAsBatch(ctx context.Context, req *toolwirev1.CallToolRequest, opts ...grpc.CallOption) (*toolwirev1.CallResult, error) {
	b, err := Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{req.GetCall()}, SessionId: req.GetSessionId()}, opts...))
	if err != nil {
		return nil, err
	}
	resp := &toolwirev1.CallToolResponse{}
	if len(b.Results) == 1 {
		resp.Result = b.Results[0]
	}
	return callResult(req, resp)
}

// finishGrace is how long a stream may stay open after BatchFinished, its
// last event, before the client ends it.
const finishGrace = time.Second

// endStream waits for the end of a stream whose BatchFinished has arrived:
// its status follows at once from a server that keeps the contract, and
// reading it lets the RPC end as it succeeded, not cancelled by the client.
// One that holds the stream open is cancelled after finishGrace.
func endStream(stream grpc.ClientStream, cancel context.CancelFunc) {
	t := time.AfterFunc(finishGrace, cancel)
	defer t.Stop()
	_ = stream.RecvMsg(new(toolwirev1.ExecuteBatchResponse))
}

// callResult is resp's result, the answer to req's call: an error when
// there is none, or when it names another call, which a runtime would
// hand its model as the answer to that one.
func callResult(req *toolwirev1.CallToolRequest, resp *toolwirev1.CallToolResponse) (*toolwirev1.CallResult, error) {
	r := resp.GetResult()
	switch {
	case r == nil:
		return nil, status.Errorf(codes.Internal, "toolwire: CallTool for call %q returned no result", req.GetCall().GetCallId())
	case r.GetCallId() != req.GetCall().GetCallId():
		return nil, status.Errorf(codes.Internal, "toolwire: CallTool for call %q returned the result of call %q", req.GetCall().GetCallId(), r.GetCallId())
	}
	return r, nil
}
