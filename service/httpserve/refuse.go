package httpserve

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// The port's own refusals (a foreign Host or Origin, the drain, a body
// past its limit) are written in the protocol of the route, and of the
// request: a surface's Refuse (JSON-RPC on /mcp), else connectRefuse.

var errorWriter = connect.NewErrorWriter()

// connectRefuse is the default Refuse: gRPC, gRPC-Web and Connect's
// streaming requests get their protocol's error (grpc-status, an
// end-of-stream message), as connect-go writes them; anything else a
// Connect unary error with the status given (WriteError), since Connect's
// own mapping would turn a 413 into a 429, which invites a retry.
func connectRefuse(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+") {
		var c connect.Code
		if c.UnmarshalText([]byte(code)) != nil {
			c = connect.CodeUnknown
		}
		if errorWriter.IsSupported(r) && errorWriter.Write(w, r, connect.NewError(c, errors.New(message))) == nil {
			return
		}
	}
	WriteError(w, status, code, message)
}

// refuseFor is how the port refuses r: its route's Refuse, or connectRefuse.
func (s *Server) refuseFor(r *http.Request) Refuse {
	if _, pattern := s.mux.Handler(r); s.refuse[pattern] != nil {
		return s.refuse[pattern]
	}
	return connectRefuse
}

// A body of no declared length (chunked, or HTTP/2 without
// content-length) is found too large only while the handler reads it, and
// each handler then answers as it would any error: connect-go with
// resource_exhausted (429), the MCP SDK with plain text. overLimitBody
// notes that the limit was passed, and refusingWriter replaces the
// handler's answer, when it has not been sent yet, with the port's 413 in
// the route's protocol.

// overLimitBody is a body under http.MaxBytesReader that notes when a read
// passes the limit.
type overLimitBody struct {
	io.ReadCloser
	over atomic.Bool
}

func (b *overLimitBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if err != nil && errors.As(err, &tooLarge) {
		b.over.Store(true)
	}
	return n, err
}

// refusingWriter passes a handler's response on unless, when the handler
// writes its status, the body has passed the limit: then it writes refuse
// instead and drops what the handler writes after.
type refusingWriter struct {
	http.ResponseWriter
	body    *overLimitBody
	refuse  func(http.ResponseWriter)
	started bool
	refused bool
	dropped http.Header // the handler's headers once refused
}

func (w *refusingWriter) Header() http.Header {
	if w.refused {
		return w.dropped
	}
	return w.ResponseWriter.Header()
}

func (w *refusingWriter) WriteHeader(status int) {
	switch {
	case w.refused:
	case w.started || status < 200:
		w.ResponseWriter.WriteHeader(status)
	default:
		w.started = true
		if !w.body.over.Load() {
			w.ResponseWriter.WriteHeader(status)
			return
		}
		w.refused, w.dropped = true, http.Header{}
		clear(w.ResponseWriter.Header())
		w.refuse(w.ResponseWriter)
	}
}

func (w *refusingWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.refused {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps streaming handlers (connect-go, the MCP SDK) streaming.
func (w *refusingWriter) Flush() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if !w.refused {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *refusingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
