package mcpsource

import (
	"context"
	"testing"

	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceContinues: a call's tools/call request to an HTTP server
// carries the call's trace (traceparent, tracestate), so the server's
// spans join it, as docs/observability.md says of the requests tools
// make; never the baggage the agent sent toolwire.
func TestTraceContinues(t *testing.T) {
	srv := newHTTPServer(t, testserver.Hooks{})
	g, reg := newGateway(t)
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "tr", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the server's tools", sourcetest.Has(prefixed("tr", testTools...)...))

	ts, err := trace.ParseTraceState("agent=1")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x0a, 0xf7, 1}, SpanID: trace.SpanID{0xb7, 2}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	bag, err := baggage.Parse("tenant=acme,user.secret=s3cr3t")
	if err != nil {
		t.Fatal(err)
	}
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), bag)
	if r := call(t, ctx, snap, "tr_read", `{"text":"hi"}`, nil); r.IsError {
		t.Fatalf("read: %q", text(r))
	}
	calls := srv.requestsMatching(func(r request) bool { return r.rpc == "tools/call" })
	if len(calls) != 1 {
		t.Fatalf("%d tools/call requests; want 1", len(calls))
	}
	h := calls[0].trace
	if got, want := h.Get("Traceparent"), "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01"; got != want {
		t.Errorf("traceparent %q; want %q", got, want)
	}
	if got := h.Get("Tracestate"); got != "agent=1" {
		t.Errorf("tracestate %q; want agent=1", got)
	}
	if got := h.Values("Baggage"); len(got) != 0 {
		t.Errorf("the server saw the agent's baggage %q", got)
	}
	for _, r := range srv.requestsMatching(func(r request) bool { return r.rpc != "tools/call" }) {
		if len(r.trace) != 0 {
			t.Errorf("a %s %s request, not the call's, carried %v", r.method, r.rpc, r.trace)
		}
	}
}
