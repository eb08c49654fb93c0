package mcpsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
)

// Streamable HTTP streams are resumed as MCP 2025-11-25 says
// ("Resumability and Redelivery"): a server may end a call's SSE stream
// after an event with an ID (SSE polling, to free its connection), and the
// client reconnects with GET and Last-Event-ID once the retry time the
// server sent has passed; the call's result arrives on the resumed stream.
// The SDK's StreamableClientTransport does all of that when its retries are
// on (MaxRetries ≥ 0; see transport). A stream that breaks is resumed the
// same way.
//
// What the SDK does when the server is gone does not suit the gateway: it
// retries a failed reconnect with backoff, about 19 s in all, and waits as
// long as the HTTP client does for one that is accepted and never answered
// (without a bound); calls in flight wait with it, and the server's tools
// stay offered. So each session's HTTP client (httpSession) watches for a
// server that is gone and gives the session up at once, failing its calls
// in flight with the cause:
//
//   - a GET (a stream opened or resumed) that fails, refused or reset;
//   - a GET that gets no answer within the server's reconnect_timeout: not
//     its response headers, and not the answer to a ping sent with it;
//   - a stream that breaks (its connection fails mid-stream, unlike a
//     stream the server ends) and a ping sent at once that gets no answer
//     within reconnect_timeout (a refused one fails at once), so that a
//     dead server is known before the SDK's first reconnect, which it makes
//     1–2 s later when the server set no retry time.
//
// The ping is what tells a dead server from a live one that has nothing to
// send yet: the go-sdk's own server sends a resumed stream's headers only
// with its next event, however long that takes. Before the session is up
// (the handshake's own GET) there is nothing to ping with, and the GET's
// headers must come within the bound.
//
// A session given up fails every later request at once (its DELETE too).
// The gateway then connects again with its own backoff, as for any session
// that ends.

// defaultReconnectTimeout is ServerConfig.ReconnectTimeout's default.
const defaultReconnectTimeout = 2 * time.Second

// httpSession is the HTTP client side of one streamable HTTP session: it
// adds the configured headers to every request to the server's origin
// (see redirect.go), observes the messages of
// every response (see wire.go), and gives the session up when the server is
// gone (see above).
type httpSession struct {
	s       *server
	headers map[string]string
	origin  *url.URL // the server's URL: headers go to its origin only
	base    http.RoundTripper
	timeout time.Duration // ServerConfig.ReconnectTimeout, or its default

	watchers sync.WaitGroup // goroutines watching a GET or pinging

	mu       sync.Mutex
	conn     mcp.Connection          // the session's connection, once made
	rpc      *rpc                    // the gateway's requests on conn, once the session is up
	lost     error                   // why the session was given up, once it was
	closed   bool                    // close was called: start no more watchers
	probing  bool                    // a ping after a broken stream is in flight
	gone     context.Context         // ended by lose, with lost as its cause: it ends the requests in flight (see send)
	cancelGo context.CancelCauseFunc // gone's

	refusedPost bool // a POST was refused (4xx) before the session was up; see legacy.go
}

func (h *httpSession) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := h.lostCause(); err != nil {
		return nil, fmt.Errorf("the session was given up: %w", err)
	}
	// The caller's trace continues on the server: traceparent and
	// tracestate of the call's span (the SDK makes a call's POST with
	// its context), as every source sends them; never the baggage an
	// agent sent toolwire (docs/sources.md, "Traces"). The configured
	// headers are set after, and win.
	trace := propagation.HeaderCarrier{}
	propagation.TraceContext{}.Inject(r.Context(), trace)
	ours := len(h.headers) > 0 && sameOrigin(r.URL, h.origin)
	if ours || len(trace) > 0 {
		r = r.Clone(r.Context())
		for k, v := range trace {
			r.Header[k] = v
		}
	}
	if ours {
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	sc := sentCallOf(r.Context())
	if sc != nil && sc.noteBody(r) {
		defer sc.noticed() // once the server has it, or it failed
	}
	var resp *http.Response
	var err error
	if r.Method == http.MethodGet {
		resp, err = h.get(r)
	} else {
		resp, err = h.send(r)
	}
	if err == nil {
		h.noteRefused(r, resp)
		h.bound(resp)
		h.s.observeBody(resp, h)
	}
	return resp, err
}

// get sends a GET, which opens or resumes an SSE stream, and gives the
// session up when the server does not answer it: the GET fails, or neither
// its headers nor the answer to a ping come within the timeout.
func (h *httpSession) get(r *http.Request) (*http.Response, error) {
	ctx, stop := context.WithCancelCause(r.Context())
	answered := make(chan struct{})
	if !h.startWatcher() {
		stop(nil)
		return nil, errors.New("the session has ended")
	}
	rpc := h.sessionRPC() // as the GET is sent: the watcher may run later
	go func() {
		defer h.watchers.Done()
		h.watch(rpc, answered, stop)
	}()
	resp, err := h.base.RoundTrip(r.WithContext(ctx))
	close(answered)
	if err == nil && ctx.Err() != nil { // given up as the headers came
		resp.Body.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		stop(nil)
		if r.Context().Err() == nil { // not the SDK's own cancellation
			h.lose(fmt.Errorf("reconnecting: %w", err))
		}
		return nil, err
	}
	resp.Body = stopOnClose{ReadCloser: resp.Body, stop: stop}
	return resp, nil
}

// send sends a POST or a DELETE, which the session's end ends if it comes
// first: a call's POST to a server that stopped answering (see alive.go)
// would otherwise wait for its response as long as its context lets it.
func (h *httpSession) send(r *http.Request) (*http.Response, error) {
	gone := h.goneContext()
	ctx, stop := context.WithCancelCause(r.Context())
	release := context.AfterFunc(gone, func() { stop(context.Cause(gone)) })
	end := func(err error) {
		release()
		stop(err)
	}
	resp, err := h.base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		if r.Context().Err() == nil && gone.Err() != nil {
			err = fmt.Errorf("the session was given up: %w", context.Cause(gone))
		}
		end(nil)
		return nil, err
	}
	resp.Body = stopOnClose{ReadCloser: resp.Body, stop: end}
	return resp, nil
}

// goneContext returns h.gone, made on first use.
func (h *httpSession) goneContext() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.goneLocked()
}

func (h *httpSession) goneLocked() context.Context {
	if h.gone == nil {
		h.gone, h.cancelGo = context.WithCancelCause(context.Background())
	}
	return h.gone
}

// watch ends a GET (stop) and the session when the server does not answer
// before answered is closed: with a ping when the session was up as the
// GET was sent (rpc), else by the timeout alone. Asked when the watcher
// ran, a GET sent before the session was up (the standalone stream's,
// at the start) was pinged for too when its watcher ran late on a loaded
// machine.
func (h *httpSession) watch(rpc *rpc, answered <-chan struct{}, stop context.CancelCauseFunc) {
	var cause error
	if rpc != nil {
		err := h.ping(rpc)
		select {
		case <-rpc.ended:
			return // the session ended meanwhile, for whatever reason
		default:
		}
		if err == nil {
			return // the server is there: the GET may wait for its stream's next event
		}
		cause = fmt.Errorf("reconnecting: %w", err)
	} else {
		timer := time.NewTimer(h.timeout)
		defer timer.Stop()
		select {
		case <-answered:
			return
		case <-timer.C:
			cause = fmt.Errorf("reconnecting: no answer within %v", h.timeout)
		}
	}
	select {
	case <-answered:
		return
	default:
	}
	h.lose(cause)
	stop(cause)
}

// ping asks the server whether it is there, waiting at most the timeout.
func (h *httpSession) ping(r *rpc) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	_, err := r.send(ctx, "ping", struct{}{}) // an error response is an answer too
	var uerr *url.Error
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("no answer within %v", h.timeout)
	case errors.As(err, &uerr):
		return fmt.Errorf("a ping failed: %w", uerr.Err) // refused, reset, …
	}
	return fmt.Errorf("a ping failed: %w", err)
}

// broke is told that one of the session's SSE streams broke: its
// connection failed mid-stream. The SDK resumes the stream after a delay; a
// ping now finds out at once whether the server is still there.
func (h *httpSession) broke() {
	h.mu.Lock()
	rpc := h.rpc
	if rpc == nil || h.probing || h.lost != nil || h.closed {
		h.mu.Unlock()
		return
	}
	h.probing = true
	h.watchers.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.watchers.Done()
		err := h.ping(rpc)
		h.mu.Lock()
		h.probing = false
		h.mu.Unlock()
		select {
		case <-rpc.ended:
			return // the session ended meanwhile, for whatever reason
		default:
		}
		if err != nil {
			h.lose(fmt.Errorf("a stream broke, then %w", err))
		}
	}()
}

// startWatcher counts a watcher about to start, unless the session's
// transport is closed.
func (h *httpSession) startWatcher() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.watchers.Add(1)
	return true
}

// lose gives the session up: every later request fails at once, and its
// connection is closed, which ends the session and fails its calls in
// flight.
func (h *httpSession) lose(cause error) {
	h.mu.Lock()
	if h.lost != nil {
		h.mu.Unlock()
		return
	}
	h.lost = cause
	h.goneLocked()
	h.cancelGo(cause)
	conn := h.conn
	h.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// lostCause is why the session was given up, or nil. h may be nil (a stdio
// session).
func (h *httpSession) lostCause() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// setConn records the session's connection; setRPC the gateway's requests
// on it, once the session is up.
func (h *httpSession) setConn(c mcp.Connection) {
	h.mu.Lock()
	h.conn = c
	h.mu.Unlock()
}

func (h *httpSession) setRPC(r *rpc) {
	h.mu.Lock()
	h.rpc = r
	h.mu.Unlock()
}

// sessionRPC is the gateway's requests on the session, nil until it is up.
// h may be nil (a stdio session).
func (h *httpSession) sessionRPC() *rpc {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rpc
}

// close waits for the watchers (each ends within the timeout) and releases
// the idle connections; the session has ended.
func (h *httpSession) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.watchers.Wait()
	if t, ok := h.base.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// stopOnClose releases a request's context when the SDK closes its body.
type stopOnClose struct {
	io.ReadCloser
	stop context.CancelCauseFunc
}

func (b stopOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.stop(nil)
	return err
}
