package engine

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps h so that records logged with a context (Logger.InfoContext
// and the like) carry what the context identifies: trace_id and span_id of
// its span, and batch_id, call_id and tool of the batch or call it belongs
// to. A server wraps its Deps.Logger's handler in it, and a tool that logs
// with the context its handler was given gets the same fields; wrap the
// program's own handler too, so its other log lines line up with traces.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*logHandler); ok {
		return h
	}
	return &logHandler{h}
}

type logHandler struct {
	next slog.Handler
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.next.Handle(ctx, r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if sc, ok := ctx.Value(logScopeKey{}).(*logScope); ok && sc.b != nil {
		r.AddAttrs(slog.String("batch_id", sc.b.id))
		if sc.i >= 0 {
			call := sc.b.req.GetCalls()[sc.i]
			r.AddAttrs(slog.String("call_id", call.GetCallId()), slog.String("tool", call.GetName()))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{h.next.WithAttrs(attrs)}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h.next.WithGroup(name)}
}

// logScope is what LogHandler adds to a log line about a batch or a call.
type logScope struct {
	b *batch
	i int // the call's index; -1 for the batch itself
}

type logScopeKey struct{}
