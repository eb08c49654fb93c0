package mcpsource

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/envref"
	"github.com/toolwire/toolwire/internal/redact"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/offer"
	"github.com/toolwire/toolwire/sources/internal/supervise"
	"github.com/toolwire/toolwire/tools"
)

// requestTimeout bounds the handshake and each listing of tools, so a server
// that accepts a connection and then says nothing is retried, not waited for.
const requestTimeout = 30 * time.Second

// server is one configured MCP server, the Runner its loop reconnects with,
// and the state its tools' handlers share with it.
type server struct {
	g   *Gateway
	cfg ServerConfig
	log *slog.Logger

	relist  chan struct{} // tools/list_changed arrived; capacity 1
	offered *offer.Tools  // its tools in the registry; only the run loop touches it

	mu      sync.Mutex
	session *mcp.ClientSession    // nil while not connected
	conn    mcp.Connection        // the session's connection, once made
	wired   *atomic.Pointer[rpc]  // where a stdio connection's reader finds its session's rpc (see wireConn)
	rpc     *rpc                  // the gateway's own requests on conn; nil while not connected
	http    *httpSession          // a streamable HTTP session's client; nil for stdio or while not connected
	calls   map[string]*forwarder // calls in flight by progress token
	seq     uint64
	// taskRequired names the tools the latest tools/list said require
	// task augmentation (execution.taskSupport "required"), as observed on
	// the wire: the SDK's Tool type does not carry the field.
	taskRequired map[string]bool
}

// newServer returns the server for c; its loop is run by g.set.
func (g *Gateway) newServer(c ServerConfig) supervise.Runner {
	return &server{
		g: g, cfg: c, log: g.log.With("mcp_server", c.Name),
		relist: make(chan struct{}, 1), calls: map[string]*forwarder{},
		offered:      offer.New(g.reg, "mcp:"+c.Name, "MCP", "the MCP server's"),
		taskRequired: map[string]bool{},
	}
}

// Retrying logs why the server is unavailable.
func (s *server) Retrying(err error, delay time.Duration) {
	s.log.Warn("MCP server unavailable; retrying", "error", err, "retry_in", delay)
}

// Connect runs one session: it connects, imports the tools, re-lists
// them whenever the server says they changed, and returns when the session
// ends, with its tools removed.
func (s *server) Connect(ctx context.Context) (connected bool, err error) {
	transport, cleanup, err := s.transport()
	if err != nil {
		return false, err
	}
	hs := transport.http
	client := mcp.NewClient(&mcp.Implementation{Name: "toolwire", Title: "toolwire MCP gateway", Version: version()}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default: // a re-list is pending already
			}
		},
		// Progress is taken off the wire, in order (see wire.go).
	})
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	cs, err := client.Connect(cctx, transport, nil)
	cancel()
	if err != nil {
		err = hs.legacyHint(ctx, err) // before cleanup, which closes hs's connections
		cleanup()
		if cause := hs.lostCause(); cause != nil {
			err = cause // the SDK says what followed: the connection closed
		}
		if st, ok := transport.Transport.(*stdioTransport); ok {
			if cause := st.conn.lostCause(); cause != nil {
				err = cause // as for hs
			}
			if cause := st.exitCause(); cause != nil {
				err = fmt.Errorf("%w (%v)", err, cause)
			}
		}
		return false, fmt.Errorf("connecting: %w", err)
	}
	ended := make(chan struct{})
	go func() {
		_ = cs.Wait()
		close(ended)
	}()
	s.mu.Lock()
	s.session = cs
	s.rpc = newRPC(s.conn, ended)
	if s.wired != nil {
		s.wired.Store(s.rpc)
	}
	s.http = hs
	if hs != nil {
		hs.setRPC(s.rpc)
	}
	s.mu.Unlock()
	defer func() {
		// Tools first, so no new call starts; then the session, which ends
		// a stdio server's process once the calls in flight have finished
		// (they fail at once if the session has broken).
		s.offered.Set(nil, s.log)
		s.mu.Lock()
		r := s.rpc
		s.session, s.rpc, s.conn, s.wired, s.http = nil, nil, nil, nil, nil
		s.mu.Unlock()
		s.g.close(cs, r, ended, ctx.Err() != nil, cleanup)
	}()
	s.log.Info("MCP server connected")
	supervise.Up(ctx)
	for {
		if err := s.refresh(ctx, cs); err != nil {
			return true, fmt.Errorf("listing tools: %w", err)
		}
		select {
		case <-ctx.Done():
			return true, nil
		case <-ended:
			cause := hs.lostCause()
			if st, ok := transport.Transport.(*stdioTransport); ok {
				cause = st.conn.lostCause()
			}
			if errors.Is(cause, errResponseTooLarge) {
				return true, fmt.Errorf("the session was given up: %w", cause)
			} else if cause != nil && hs == nil {
				return true, fmt.Errorf("the session ended: %w", cause)
			} else if cause != nil {
				return true, fmt.Errorf("the server is gone: %w", cause)
			}
			return true, errors.New("the connection closed (the server exited or went away)")
		case <-s.relist:
			s.log.Info("MCP server's tools changed; listing them again")
		}
	}
}

// transport returns the transport for the server, with {{ENV_VAR}}
// references expanded, and a function that releases what it holds once
// the session has ended.
func (s *server) transport() (wireTransport, func(), error) {
	if s.cfg.Command != "" {
		env, err := envref.ExpandMap(s.cfg.Env)
		if err != nil {
			return wireTransport{}, nil, fmt.Errorf("env %w", err)
		}
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stderr = &lineLogger{log: s.log}
		t := &stdioTransport{cmd: cmd, terminate: s.g.terminate, grace: s.pingTimeout(), log: s.log}
		return wireTransport{Transport: t, s: s, wrap: true}, func() {}, nil
	}
	headers, err := envref.ExpandMap(s.cfg.Headers)
	if err != nil {
		return wireTransport{}, nil, fmt.Errorf("header %w", err)
	}
	endpoint, err := url.Parse(s.cfg.URL)
	if err != nil {
		return wireTransport{}, nil, redact.Error(err, s.cfg.URL) // Validate parsed it
	}
	hs := &httpSession{
		s: s, headers: headers, origin: endpoint,
		// A transport of its own, so closing its idle connections at the end
		// of the session leaves no goroutine behind.
		base:    http.DefaultTransport.(*http.Transport).Clone(),
		timeout: cmp.Or(s.cfg.ReconnectTimeout, defaultReconnectTimeout),
	}
	t := &mcp.StreamableClientTransport{
		Endpoint: s.cfg.URL,
		// Redirects stay within the endpoint's origin (see redirect.go).
		HTTPClient: &http.Client{Transport: hs, CheckRedirect: sameOriginRedirect},
		// An SSE event is bounded (by hs, sseBound) as a JSON answer is;
		// the SDK's bound is only a backstop above it. The SDK's zero, said
		// to select mcp.DefaultMaxEventSize, leaves events unbounded
		// (go-sdk v1.8.0): a server's 17 MiB event was read whole.
		MaxEventSize: maxResponseBody + sseSlack,
		// Retries stay on (the SDK's default, 5): they are how streams are
		// resumed. hs gives the session up as soon as the server is gone,
		// before the SDK's retries would (see resume.go).
	}
	if s.cfg.OAuth != nil {
		// Metadata and token requests share the session's transport, so
		// its end closes their connections too, but not its observing.
		t.OAuthHandler = newOAuthClient(*s.cfg.OAuth, s.cfg.URL, &http.Client{Transport: hs.base, Timeout: requestTimeout})
	}
	return wireTransport{Transport: t, s: s, http: hs}, hs.close, nil
}

// refresh lists the server's tools and swaps them into the registry. A
// listing that goes on past the bounds (see bounds.go) is cut short with an
// error logged, and the tools listed before the cut are offered.
func (s *server) refresh(ctx context.Context, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	s.mu.Lock()
	clear(s.taskRequired)
	s.mu.Unlock()
	var list []tools.Tool
	seen := map[string]bool{}
	l := listing.Listing{Max: s.g.listBounds}
	schemas := &tools.SchemaCache{}
	params := &mcp.ListToolsParams{}
	for {
		page, err := cs.ListTools(ctx, params)
		if err != nil {
			return err
		}
		for _, t := range page.Tools {
			if !l.Tool() {
				break
			}
			if seen[t.Name] {
				s.log.Warn("MCP server lists a tool twice; using the first", "tool", t.Name)
				continue
			}
			seen[t.Name] = true
			d, err := declaration(s.cfg.Name, t, s.handler(t.Name, s.requiresTask(t.Name)), schemas)
			if err != nil {
				s.log.Warn("skipping MCP tool", "tool", t.Name, "error", err)
				continue
			}
			if !l.Keep(d) {
				break
			}
			list = append(list, d)
		}
		if l.Cut != nil || !l.Next(page.NextCursor) {
			break
		}
		params = &mcp.ListToolsParams{Cursor: page.NextCursor}
	}
	if l.Cut != nil {
		s.log.Error("MCP server's tools/list cut short; offering the tools listed before the cut", "error", l.Cut, "tools", len(list))
	}
	s.offered.Set(list, s.log)
	return nil
}

// requiresTask reports whether the latest listing said tool requires task
// augmentation (see tasks.go).
func (s *server) requiresTask(tool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taskRequired[tool]
}

// noteTaskSupport records which tools of a tools/list result require task
// augmentation.
func (s *server) noteTaskSupport(result json.RawMessage) {
	var list struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &list) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range list.Tools {
		if t.Execution != nil && t.Execution.TaskSupport == "required" {
			s.taskRequired[t.Name] = true
		}
	}
}

// handler forwards calls of the server's tool remote, as MCP tasks when
// task is set.
func (s *server) handler(remote string, task bool) tools.Handler {
	return func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
		fwd := &forwarder{call: call}
		s.mu.Lock()
		cs, rpc, hs := s.session, s.rpc, s.http
		s.seq++
		token := fmt.Sprintf("toolwire-%d", s.seq)
		if cs != nil {
			s.calls[token] = fwd
		}
		s.mu.Unlock()
		if cs == nil {
			return tools.Errorf("MCP server %q is not connected; its tools come back when it reconnects", s.cfg.Name), nil
		}
		defer func() {
			s.mu.Lock()
			delete(s.calls, token)
			s.mu.Unlock()
			fwd.finish(ctx)
		}()
		// The session stays open until the call returns, so that its
		// cancellation still reaches the server (rpc.drain).
		f := rpc.begin(ctx)
		defer rpc.end(f)
		// A call whose context ends before its answer has the server
		// pinged, in case it stopped answering (see alive.go).
		defer s.watchCall(ctx, rpc, hs)()
		if task {
			return s.callTask(ctx, rpc, hs, remote, call.Arguments, token, fwd)
		}
		if directCalls(cs, hs) {
			return s.callDirect(ctx, rpc, remote, call.Arguments, token)
		}
		params := &mcp.CallToolParams{Name: remote, Arguments: json.RawMessage(call.Arguments)}
		params.SetProgressToken(token)
		// The SDK sends notifications/cancelled when ctx ends, on a
		// goroutine of its own after the call has returned: the call
		// waits for it to be written before it ends (see awaitNotice),
		// and on a session that has begun to close, where the SDK may
		// no longer send, the gateway sends it (see sentCall). Only
		// there: on a live session the notice would be sent twice, each
		// its own POST, the second on a connection of its own while the
		// call's is held.
		sctx, sent := withSentCall(ctx)
		written := new(asWritten)
		defer written.release()
		r, err := cs.CallTool(context.WithValue(sctx, asWrittenKey{}, written), params)
		if err != nil {
			if id, ok := sent.ID(); ok && ctx.Err() != nil && !sent.awaitNotice(rpc.ended) && rpc.closing() {
				rpc.cancelID(context.WithoutCancel(ctx), id, ctx.Err())
			}
			return s.failed(ctx, hs, rpc, err)
		}
		out := result(r)
		written.apply(out)
		return out, nil
	}
}

// progress forwards an MCP progress notification to the call it belongs to.
func (s *server) progress(p *mcp.ProgressNotificationParams) {
	s.mu.Lock()
	fwd := s.calls[fmt.Sprint(p.ProgressToken)]
	s.mu.Unlock()
	if fwd == nil {
		return // the call has finished
	}
	progress := p.Progress
	rep := tools.Progress{Progress: &progress, Message: p.Message}
	if p.Total > 0 { // MCP: zero means unknown
		total := p.Total
		rep.Total = &total
	}
	fwd.add(rep)
}

// lineLogger logs a stdio server's stderr line by line.
type lineLogger struct {
	log *slog.Logger
	buf []byte
}

const maxLine = 4 << 10

func (w *lineLogger) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > maxLine {
				w.log.Info("MCP server stderr", "line", string(w.buf[:maxLine]))
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		line := w.buf[:min(i, maxLine)]
		w.log.Info("MCP server stderr", "line", string(line))
		w.buf = w.buf[i+1:]
	}
}

// version is toolwire's module version, for the client information MCP
// servers see.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
