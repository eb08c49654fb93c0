// Package mcpserve is toolwire's MCP surface: an http.Handler that serves
// the Model Context Protocol's streamable HTTP transport over the one
// engine, with the official go-sdk's server (mcp.NewStreamableHTTPHandler).
// cmd/toolwire hands it to the HTTP port (httpserve) as /mcp.
//
// It speaks both protocol revisions the go-sdk does, chosen per request by
// the Mcp-Protocol-Version header: 2026-07-28 is stateless (no initialize,
// no Mcp-Session-Id; each request carries its version and capabilities in
// _meta), so any replica answers any request behind a plain load balancer;
// 2025-11-25 and older keep sessions, which live on the replica that made
// them.
//
// tools/list offers the caller's permitted tools (engine.Tools), with
// 2026-07-28 cache hints; a registry change sends list-changed notices
// (notifications/tools/list_changed to 2025-11-25 sessions, the
// subscriptions/listen stream on 2026-07-28). tools/call runs through
// engine.Run, ordered per session by engine.Sequence; MCP progress tokens
// and cancellation map to toolwire's, results map back, and toolwire's own
// keys ride in _meta (see MetaSessionID and the other Meta constants).
// The engine's coded errors become JSON-RPC errors in one function,
// rpcError.
//
// It bounds what clients can make it hold: 2025-11-25 sessions per caller
// and in total, closing the idle ones (sessions.go); a client that stops
// reading, under the engine's max_buffered_bytes and send watchdog for a
// call and internal/writewatch for any other write (requests.go). What it
// refuses, it refuses in JSON-RPC, the SDK's own plain-text refusals
// included (refusals.go); the SDK's per-request INFO lines go to DEBUG
// (logging.go).
//
// Authentication is not its job: the HTTP port wraps the handler in the
// shared auth middleware, which puts the caller in the request's context
// (engine.WithCaller) or answers 401 before the handler runs.
//
// Import rules: mcpserve may import engine, tools, gen/toolwire/v1 and the
// go-sdk; it must not import service/, sources/, store/, httpserve or cmd/
// (docs/architecture.md), and engine must never import it.
package mcpserve

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/writewatch"
	"github.com/toolwire/toolwire/tools"
)

// The defaults of the sessions' bounds (Options, Config).
const (
	DefaultSessionTimeout       = 10 * time.Minute
	DefaultMaxSessions          = 1000
	DefaultMaxSessionsPerCaller = 100
)

// The protocol revisions this surface is tested with; the go-sdk also
// answers the older ones (2025-06-18, 2025-03-26, 2024-11-05) as it
// answers RevisionSessions.
const (
	// RevisionStateless is served without sessions, and so is every later
	// revision.
	RevisionStateless = "2026-07-28"
	// RevisionSessions is the newest revision with initialize and
	// Mcp-Session-Id.
	RevisionSessions = "2025-11-25"
)

// Options configure a Server; the zero value means every default.
type Options struct {
	// Logger receives the SDK's and the surface's logs. Default: discard.
	Logger *slog.Logger
	// Version is the server version reported to clients. Default "(devel)".
	Version string
	// SessionTimeout closes a 2025-11-25 session after this long with no
	// request of its client in flight (a GET stream counts as one).
	// Default 10m.
	SessionTimeout time.Duration
	// MaxSessions bounds the 2025-11-25 sessions open at once; a new one
	// past it closes the session idle longest of the caller holding the
	// most. It bounds the 2026-07-28 subscriptions/listen streams open at
	// once apart, alike: one past it is refused. Default 1000.
	MaxSessions int
	// MaxSessionsPerCaller bounds one caller's sessions; a new one past it
	// closes that caller's session idle longest. It bounds one caller's
	// subscriptions/listen streams apart, alike. Default 100.
	MaxSessionsPerCaller int
	// MaxListTTL caps the ttlMs hint of tools/list (2026-07-28). The hint is
	// a tenth of how long the registry's revision has held on this
	// replica, up to this cap: a registry that just changed may change
	// again soon. Default 1m.
	MaxListTTL time.Duration
	// PageSize bounds the tools of one tools/list page. Default and most
	// 1000 (engine.MaxPageSize); a page also stays within the engine's
	// MaxMessageBytes, as ListTools' pages do.
	PageSize int
	// ResumeBytes bounds the memory that keeps 2025-11-25 streams'
	// events for clients that resume a cut stream (Last-Event-ID), over
	// all sessions, the least recently written streams dropped first
	// (resume.go). Default 16 MiB; negative keeps nothing, and streams
	// then carry no event IDs and cannot be resumed.
	ResumeBytes int
	// ResumeRetry is the retry field of every 2025-11-25 stream's first
	// event: how long a client whose stream is cut waits before it
	// reconnects. Default 1s.
	ResumeRetry time.Duration
}

// withDefaults fills in o's defaults, or says why o cannot be used.
func (o Options) withDefaults() (Options, error) {
	c := o
	if c.MaxSessions < 0 || c.MaxSessionsPerCaller < 0 {
		return c, fmt.Errorf("mcpserve: MaxSessions %d and MaxSessionsPerCaller %d cannot be negative (0: the default)", c.MaxSessions, c.MaxSessionsPerCaller)
	}
	if c.PageSize > engine.MaxPageSize {
		return c, fmt.Errorf("mcpserve: PageSize %d is more than a page holds (%d)", c.PageSize, engine.MaxPageSize)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "(devel)"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxSessionsPerCaller <= 0 {
		c.MaxSessionsPerCaller = DefaultMaxSessionsPerCaller
	}
	if c.MaxListTTL <= 0 {
		c.MaxListTTL = time.Minute
	}
	if c.PageSize <= 0 {
		c.PageSize = 1000
	}
	if c.ResumeBytes == 0 {
		c.ResumeBytes = defaultResumeBytes
	}
	if c.ResumeRetry <= 0 {
		c.ResumeRetry = defaultResumeRetry
	}
	return c, nil
}

// Server is the MCP surface of an engine: an http.Handler for /mcp.
type Server struct {
	eng  *engine.Engine
	reg  *tools.Registry
	opts Options
	sdk  *mcp.Server
	impl *mcp.Implementation // the server as clients see it

	stateless http.Handler // 2026-07-28
	stateful  http.Handler // 2025-11-25 and older
	handler   http.Handler // the two, behind the caller's binding
	events    *eventStore  // 2025-11-25 streams' events, for resumption; nil: none kept

	sessions *sessions         // bounds the 2025-11-25 sessions (sessions.go)
	listens  *listens          // bounds the 2026-07-28 subscriptions/listen streams (listens.go)
	writes   *writewatch.Watch // ends the writes of clients that stop reading (requests.go)
	requests atomic.Uint64     // numbers the requests in flight
	inflight sync.Map          // the requests in flight by number: *request

	rev     atomic.Pointer[revision] // the registry's revision as the watcher last saw it
	calls   atomic.Uint64            // numbers calls that name no call_id
	fast    atomic.Uint64            // stateless tools/calls the fast path answered (fastcall.go)
	sdkOnly bool                     // tests: the SDK answers every request
	stop    chan struct{}            // closed by Close: the watcher returns
	stopped sync.WaitGroup
	closing sync.Once
}

var _ http.Handler = (*Server)(nil)

// New returns the MCP surface of eng, serving the tools of reg, or an
// error naming the option it cannot use. It starts two goroutines, one
// watching reg for changes, one closing sessions the bounds do not hold;
// Close or Shutdown stops them.
func New(eng *engine.Engine, reg *tools.Registry, opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{eng: eng, reg: reg, opts: o, stop: make(chan struct{})}
	s.sessions = newSessions(s.opts.MaxSessions, s.opts.MaxSessionsPerCaller, s.opts.SessionTimeout, s.opts.Logger)
	s.listens = newListens(s.opts.MaxSessions, s.opts.MaxSessionsPerCaller)
	s.writes = writewatch.New(eng.Config().SendTimeout, eng.Config().MaxBufferedBytes, "MCP response", s.opts.Logger)
	sdkLog := sdkLogger(s.opts.Logger)
	s.impl = &mcp.Implementation{Name: "toolwire", Title: "toolwire", Version: s.opts.Version}
	s.sdk = mcp.NewServer(s.impl, &mcp.ServerOptions{
		Logger:       sdkLog,
		Capabilities: capabilities(), // tools only (capabilities.go)
	})
	s.sdk.AddReceivingMiddleware(refuseUndeclared, s.middleware)
	s.markRevision(reg.Snapshot().Revision())
	getServer := func(*http.Request) *mcp.Server { return s.sdk }
	s.stateless = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true,
		// On 2026-07-28 the POST is the whole request: a client that goes
		// away cancels the call (its notifications/cancelled would reach
		// another, ephemeral session).
		PropagateRequestCancellation: true,
		Logger:                       sdkLog,
	})
	// Sessions are bounded and idled out by s.sessions, not the SDK.
	stateful := &mcp.StreamableHTTPOptions{Logger: sdkLog}
	if s.opts.ResumeBytes > 0 { // resumable streams (resume.go)
		s.events = newEventStore(s.opts.ResumeBytes)
		stateful.EventStore = s.events
	}
	s.stateful = mcp.NewStreamableHTTPHandler(getServer, stateful)
	if s.events != nil {
		s.stateful = withRetry(s.stateful, s.opts.ResumeRetry)
	}
	s.handler = auth.RequireBearerToken(bindCaller, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(http.HandlerFunc(s.route))
	s.stopped.Add(2)
	go s.watch()
	go s.sweep() // closes sessions the bounds do not hold (sessions.go)
	return s, nil
}

// ServeHTTP serves MCP's streamable HTTP transport.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !bearer(r.Header.Get("Authorization")) {
		// bindCaller runs behind the SDK's bearer-token middleware, which
		// wants a token to hand it; the caller was authenticated already,
		// by whatever means, so any placeholder does.
		r2 := *r
		r2.Header = r.Header.Clone()
		r2.Header.Set("Authorization", "Bearer -")
		r = &r2
	}
	s.handler.ServeHTTP(w, r)
}

// route hands a request to the handler of its revision: 2026-07-28 and
// later to the stateless one, everything else (initialize, requests of a
// session, GET streams and DELETE) to the one with sessions (serve, in
// requests.go).
func (s *Server) route(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

// callerPrefix marks the TokenInfo.UserID that bindCaller makes, so the
// anonymous caller ("") has a user ID too.
const callerPrefix = "toolwire:"

// bindCaller hands the SDK the caller that authentication put in the
// request's context (engine.IdentityFrom) as the request's auth.TokenInfo:
// the SDK carries it to the request's handler (RequestExtra.TokenInfo)
// whichever session serves it, and refuses a 2025-11-25 session to any
// caller but the one that opened it (403, "session user mismatch"), which
// it tells by UserID, the caller's ID. The whole identity rides in Extra.
func bindCaller(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
	id := engine.IdentityFrom(r.Context())
	return &auth.TokenInfo{UserID: callerPrefix + id.ID, Extra: map[string]any{identityKey: id}}, nil
}

// identityKey is the TokenInfo.Extra key of the caller's engine.Identity.
const identityKey = "toolwire.identity"

// withCaller returns ctx carrying the identity of the caller of a request
// bindCaller bound (the anonymous caller's when none was).
func withCaller(ctx context.Context, req mcp.Request) context.Context {
	if x := req.GetExtra(); x != nil && x.TokenInfo != nil {
		if id, ok := x.TokenInfo.Extra[identityKey].(*engine.Identity); ok {
			return engine.WithIdentity(ctx, id)
		}
	}
	return engine.WithIdentity(ctx, nil)
}

// bearer reports whether h is an Authorization header the SDK's bearer
// middleware takes.
func bearer(h string) bool {
	scheme, token, ok := strings.Cut(h, " ")
	return ok && strings.EqualFold(scheme, "bearer") && token != "" && !strings.ContainsAny(token, " \t")
}

// middleware answers tools/list itself, over the engine, and routes every
// tools/call to the dispatcher (see list.go), with the name called in the
// context: the SDK's own call path then runs (a result typed "complete" on
// 2026-07-28, content never null), and the dispatcher runs the call on the
// engine. The SDK answers the rest (initialize, server/discover, ping,
// subscriptions/listen, …).
func (s *Server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "initialize" {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			if unreserved(ctx, ss) {
				s.opts.Logger.Warn("refusing an initialize that took no place in the MCP sessions' bounds", "session_id", ss.ID())
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this initialize was not read as one before it reached the MCP server, so it cannot open a session; send it alone, as plain JSON"}
			}
			if ss != nil && ss.InitializeParams() != nil {
				// The SDK's own answer has no code (0).
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this session is initialized already; to open another, send initialize without Mcp-Session-Id"}
			}
			res, err := next(ctx, method, req)
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && err == nil {
				s.initialized(ctx, ss) // counted in the sessions' bounds
			}
			return res, err
		}
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			if method == "tools/list" {
				return s.listTools(withCaller(ctx, req), r)
			}
		case *mcp.CallToolRequest:
			if method == "tools/call" && r.Params != nil {
				ctx = context.WithValue(ctx, calledKey{}, r.Params.Name)
				r.Params.Name = dispatcher
			}
		}
		return next(ctx, method, req)
	}
}

// calledKey is the context key of the tool name a tools/call called.
type calledKey struct{}

// dispatch is the dispatcher's handler: it runs the call the middleware
// routed to it.
func (s *Server) dispatch(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, _ := ctx.Value(calledKey{}).(string)
	return s.callTool(withCaller(ctx, req), req, name)
}

// Close stops watching the registry and closes every MCP session, which
// ends their streams (2025-11-25 GET streams, 2026-07-28
// subscriptions/listen) and the calls still running on them. It does not
// drain the engine; Shutdown does.
func (s *Server) Close() {
	s.closing.Do(func() {
		close(s.stop)
		s.stopped.Wait()
		s.sessions.close()
	})
	for ss := range s.sdk.Sessions() {
		_ = ss.Close()
	}
}

// Shutdown drains the engine (running calls finish, for up to its
// DrainTimeout; new calls are refused as Unavailable), then closes. The
// HTTP port's own drain then finds no stream held open by a session.
func (s *Server) Shutdown() {
	s.eng.Drain()
	s.Close()
}
