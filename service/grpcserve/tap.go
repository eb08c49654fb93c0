package grpcserve

import (
	"context"
	"errors"
	"net"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// A client that stops reading a batch's stream stops the server too: HTTP/2
// flow control holds the writer in stream.Send, and the batch's calls wait to
// report behind it. The send watchdog ends such a stream after SendTimeout,
// or sooner when the events waiting for slow readers pass MaxBufferedBytes.
//
// Ending it is the hard part. The writer must be the handler's goroutine
// (grpc-go does not allow returning from the handler while another
// goroutine is in Send), and a Send held by flow control returns only when
// the stream's transport context ends; grpc-go gives a handler no way to end
// it. The one hook is the tap handle, whose returned context becomes that
// transport context: stoppable makes it one the watchdog can cancel.

// stoppableStream is an ExecuteBatch or AttachBatch stream's transport
// context, as the tap handle made it.
type stoppableStream struct {
	context.Context // a child of the transport's own
	stop            context.CancelCauseFunc
	conns           *connSet // Serve's connections
	peer            net.Addr // the client's address, naming its connection; nil if unknown
}

// stoppable is the tap handle ServerOptions installs: it admits each
// stream (Config.Admit), and makes the context of each ExecuteBatch and
// AttachBatch stream one that the send watchdog can end.
func (s *Server) stoppable(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.cfg.Admit != nil {
		var err error
		if ctx, err = s.cfg.Admit(ctx, info.FullMethodName, info.Header); err != nil {
			return nil, err
		}
	}
	switch info.FullMethodName {
	case toolwirev1.ToolService_ExecuteBatch_FullMethodName, toolwirev1.ToolService_AttachBatch_FullMethodName:
	default:
		return ctx, nil
	}
	inner, stop := context.WithCancelCause(ctx)
	st := &stoppableStream{Context: inner, stop: stop, conns: s.conns}
	if p, ok := peer.FromContext(ctx); ok {
		st.peer = p.Addr
	}
	return st, nil
}

// Value gives the engine the stream as its Stopper (engine.StopperKey).
func (c *stoppableStream) Value(key any) any {
	if key == (engine.StopperKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// Err reports a stream the engine ended, its client not reading (for its
// send timeout or to keep the buffered events within their budget), as
// past a deadline: the transport turns this error into the status it
// sends, and DEADLINE_EXCEEDED tells the client that it did not read in
// time, where CANCELLED would suggest that it cancelled the RPC itself. A
// context's error can only be one of the two, so RESOURCE_EXHAUSTED, what
// the engine returns for the budget, cannot reach the client this way.
func (c *stoppableStream) Err() error {
	err := c.Context.Err()
	if err != nil {
		if cause := context.Cause(c.Context); errors.Is(cause, engine.ErrSendTimeout) || errors.Is(cause, engine.ErrOverBudget) {
			return context.DeadlineExceeded
		}
	}
	return err
}

// StopSend ends the stream's transport context with cause, so that a Send
// which flow control holds returns; the engine calls it once SendTimeout
// has passed, or to shed the stream when the events waiting for slow
// readers pass MaxBufferedBytes.
//
// The transport still holds what it accepted of the stream until the client
// reads, cancels or disconnects; the stream is counted against its
// connection, which Serve closes when such streams pile up (conns.go).
func (c *stoppableStream) StopSend(cause error) bool {
	c.stop(cause)
	c.conns.streamEnded(c.peer)
	return true
}
