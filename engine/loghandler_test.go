package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestLogHandler checks the handler on its own: fields from a span in the
// context, none without one, and the wrapping survives With and WithGroup.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()

	log.InfoContext(ctx, "with span")
	log.Info("without context")
	log.WithGroup("g").InfoContext(ctx, "grouped", "k", "v")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines; want 3:\n%s", len(lines), buf.String())
	}
	sc := span.SpanContext()
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if first["trace_id"] != sc.TraceID().String() || first["span_id"] != sc.SpanID().String() || first["component"] != "test" {
		t.Errorf("line with a span: %s", lines[0])
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("line without a span has a trace_id: %s", lines[1])
	}
	if !strings.Contains(lines[2], sc.TraceID().String()) {
		t.Errorf("grouped line lost the trace: %s", lines[2])
	}
	if h := LogHandler(log.Handler()); h != log.Handler() {
		t.Error("LogHandler wrapped its own handler again")
	}
}
