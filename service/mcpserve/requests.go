package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/writewatch"
	"github.com/toolwire/toolwire/tools"
)

// A client that stops reading holds what the server writes to it. On the
// gRPC port the engine's send watchdog ends such a stream (send_timeout)
// and, over all streams, keeps what waits for slow readers within
// max_buffered_bytes; /mcp is held to the same:
//
//   - A tools/call runs as a batch whose sink is the request's response:
//     progress is written inside the batch's Send, and so is the result —
//     its Send hands the result to the SDK, which writes it, and returns
//     only once the response is done. So the engine's budget counts the
//     result while it is written, and its watchdog ends the response (the
//     request's writewatch.Writer is the batch's Stopper) of a client that
//     reads nothing for send_timeout, or that holds the most when the
//     budget is spent; the call, if still running, is cancelled.
//   - Every other write of /mcp (a tools/list page, an initialize result,
//     list-changed notices on a GET or subscriptions/listen stream) is
//     ended by the surface's writewatch.Watch after send_timeout.
//
// The call's handler finds its request's writer by a header the surface
// sets on each request (the SDK hands handlers the request's header, and
// nothing else of it, whichever session serves the request).

// requestHeader carries the number of a request in flight on /mcp, set by
// serve (a client's own value is dropped).
const requestHeader = "Toolwire-Mcp-Request"

// request is a request to /mcp in flight.
type request struct {
	w    *writewatch.Writer
	done chan struct{} // closed once the SDK is done with the request: its response is written, or never will be
}

// serve serves one request to /mcp: the protocol version is checked, the
// request is registered for its calls, and it goes to the handler of its
// revision (2026-07-28 and later: stateless; the rest: sessions, within
// their bounds), whose refusals are written as JSON-RPC errors.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	ww := s.writes.Wrap(w, r)
	body := &capture{ReadCloser: r.Body}
	r.Body = body
	rw := &refusing{ResponseWriter: ww, method: r.Method}
	defer func() {
		rw.finish(body)
		// What is left in the server's buffers goes out while watched: a
		// client that reads nothing holds it no longer than the rest.
		_ = ww.FlushError()
		ww.Done()
	}()

	version := r.Header.Get("Mcp-Protocol-Version")
	if version != "" && !known(version) {
		unsupportedVersion(ww, body, version)
		return
	}
	var b []byte
	if r.Method == http.MethodPost {
		var ok bool
		if b, ok = readBody(ww, r, body); !ok {
			return
		}
		if s.serveFast(rw, ww, r, version, b) { // a stateless tools/call (fastcall.go)
			return
		}
		// What the fast path answers has IDs it keeps; the SDK may not
		// (ids.go).
		if e := checkIDs(b); e != nil {
			writeRefusal(ww, http.StatusBadRequest, e.id, e.code, "invalid_argument", e.message, nil)
			return
		}
	}
	key := strconv.FormatUint(s.requests.Add(1), 36)
	r.Header.Set(requestHeader, key)
	rq := &request{w: ww, done: make(chan struct{})}
	s.inflight.Store(key, rq)
	defer func() {
		s.inflight.Delete(key)
		close(rq.done)
	}()
	if version >= RevisionStateless {
		if m := firstMessages(b); m.listen {
			caller := engine.IdentityFrom(r.Context()).ID
			release, err := s.listens.take(caller) // listens.go
			if err != nil {
				s.opts.Logger.Warn("refusing a subscriptions/listen stream: "+err.Error(), "caller", caller)
				// 200, as for an initialize past the sessions' bounds
				// (sessions.go): the answer to the request it names.
				writeRefusal(ww, http.StatusOK, m.id, CodeResourceExhausted, "resource_exhausted", err.Error(), nil)
				return
			}
			defer release()
		}
		s.stateless.ServeHTTP(rw, r)
		return
	}
	s.serveSessions(rw, r, b)
}

// readBody reads the body of r, a POST, and refuses it (reporting false)
// when it is too large, is not one JSON value, or holds a message with a
// member named twice (members.go). r's body is then b again, for the SDK.
func readBody(w http.ResponseWriter, r *http.Request, body *capture) (b []byte, ok bool) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// Neither toolwire nor the SDK decompresses a body (so a gzip
		// bomb costs nothing here); say so rather than call it malformed.
		writeRefusal(w, http.StatusUnsupportedMediaType, nil, jsonrpc.CodeInvalidRequest, "invalid_argument",
			fmt.Sprintf("the request's body is encoded (Content-Encoding: %s); /mcp takes bodies unencoded", ce), nil)
		return nil, false
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeRefusal(w, http.StatusRequestEntityTooLarge, body.id(), CodeResourceExhausted, "resource_exhausted",
				fmt.Sprintf("the request's body is over %d bytes, the most this server takes (http_max_body_bytes)", tooBig.Limit), nil)
			return nil, false
		}
		writeRefusal(w, http.StatusBadRequest, body.id(), jsonrpc.CodeInvalidRequest, "invalid_argument", "reading the request's body: "+err.Error(), nil)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	if len(b) == 0 {
		return b, true // the SDK refuses it, saying what a POST needs
	}
	if !json.Valid(b) {
		writeRefusal(w, http.StatusBadRequest, body.id(), jsonrpc.CodeParseError, "invalid_argument",
			"malformed payload: the body is not one JSON value (a JSON-RPC message or batch) with nothing after it", nil)
		return nil, false
	}
	if err := checkMembers(b); err != nil {
		writeRefusal(w, http.StatusBadRequest, body.id(), jsonrpc.CodeInvalidRequest, "invalid_argument", err.Error(), nil)
		return nil, false
	}
	return b, true
}

// requestOf is the request in flight that req came in, or nil.
func (s *Server) requestOf(req *mcp.CallToolRequest) *request {
	x := req.GetExtra()
	if x == nil || x.Header == nil {
		return nil
	}
	if rq, ok := s.inflight.Load(x.Header.Get(requestHeader)); ok {
		return rq.(*request)
	}
	return nil
}

// run runs batch, the call of a tools/call, with sink, and returns its
// result once the batch's Send has it; the Send then waits for the
// response to be written (see above). Without a request (a handler called
// other than through serve) the batch runs to its end first.
func (s *Server) run(ctx context.Context, snap *tools.Snapshot, batch *toolwirev1.ExecuteBatchRequest, sink *callSink, rq *request) (*mcp.CallToolResult, error) {
	if rq == nil {
		if err := s.eng.Run(ctx, snap, batch, sink); err != nil {
			return nil, rpcError(err)
		}
		if sink.result == nil { // Run sends every call's result before it returns nil
			return nil, rpcError(&engine.Error{Code: engine.Internal, Message: "the call ended without a result"})
		}
		return mcpResult(sink.result), nil
	}
	handoff := make(chan *mcp.CallToolResult, 1)
	sink.handoff = handoff
	sink.written = rq.done
	sink.w = rq.w
	release := rq.w.Engage()
	ctx = context.WithValue(ctx, engine.StopperKey{}, rq.w)
	ended := make(chan error, 1)
	go func() {
		defer release()
		ended <- s.eng.Run(ctx, snap, batch, sink)
	}()
	return awaitResult(handoff, ended)
}

// awaitResult returns the result the batch's Send hands off, or, when
// the batch ended without one, the error of its end.
//
// Send hands the result off before Run returns, and, when the request has
// ended already (its stream was cut: on 2025-11-25 the call runs on, and
// its result goes to the event store for the client that resumes), it no
// longer waits for a response to be written: Run can end before this
// handler reaches its select, and select then picks either ready channel.
// A result handed off is never dropped for the end that came after it: it
// is the result the resumed stream is owed.
func awaitResult(handoff <-chan *mcp.CallToolResult, ended <-chan error) (*mcp.CallToolResult, error) {
	select {
	case res := <-handoff:
		return res, nil
	case err := <-ended:
		select {
		case res := <-handoff: // handed off before Run returned
			return res, nil
		default:
		}
		if err != nil {
			return nil, rpcError(err)
		}
		return nil, rpcError(&engine.Error{Code: engine.Internal, Message: "the call ended without a result"})
	}
}
