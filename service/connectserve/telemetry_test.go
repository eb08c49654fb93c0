package connectserve_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	"github.com/toolwire/toolwire/service/connectserve"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTelemetry: with the providers serve chose, a CallTool over Connect
// gets otelconnect's server span, which continues the client's trace
// (traceparent) and is the parent of the engine's execute_tool span; and
// without them, the tool's span still continues the client's trace.
func TestTelemetry(t *testing.T) {
	t.Parallel()
	for _, rpcSpans := range []bool{true, false} {
		name := "rpc spans"
		if !rpcSpans {
			name = "engine spans only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			reg, err := tools.NewRegistry(diag.Tools()...)
			if err != nil {
				t.Fatal(err)
			}
			eng := engine.New(engine.Config{DrainTimeout: time.Second}, engine.Deps{Logger: slog.New(slog.DiscardHandler), Observer: otelobserver.New(tp, nil, false)})
			t.Cleanup(eng.Close)
			var opts connectserve.Options
			if rpcSpans {
				opts.TracerProvider = tp
			}
			srv, err := connectserve.New(eng, reg, opts)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := auth.New(auth.Config{})
			port := httpserve.New(httpserve.Config{}, nil, nil)
			port.Handle(connectserve.Path, auth.RequireCredentials(v, nil)(srv), nil)
			ts := httptest.NewServer(port.Handler())
			t.Cleanup(ts.Close)

			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/toolwire.v1.ToolService/CallTool", strings.NewReader(curlBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Traceparent", "00-"+traceID+"-"+parentID+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CallTool: %s", resp.Status)
			}
			byName := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended() {
				byName[s.Name()] = s
			}
			tool := byName["execute_tool echo"]
			if tool == nil {
				t.Fatalf("no execute_tool span among %v", keys(byName))
			}
			if got := tool.SpanContext().TraceID().String(); got != traceID {
				t.Errorf("execute_tool's trace %s, want the client's %s", got, traceID)
			}
			want := parentID // the client's span, without the RPC's own
			if rpcSpans {
				rpc := byName["toolwire.v1.ToolService/CallTool"]
				if rpc == nil {
					t.Fatalf("no RPC span among %v", keys(byName))
				}
				if rpc.SpanKind() != trace.SpanKindServer || rpc.Parent().SpanID().String() != parentID {
					t.Errorf("RPC span: kind %v, parent %s; want a server span under the client's %s", rpc.SpanKind(), rpc.Parent().SpanID(), parentID)
				}
				want = rpc.SpanContext().SpanID().String()
			}
			// Up from the tool's span, through the engine's own (a batch's), to
			// want.
			var chain []string
			bySpanID := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range byName {
				bySpanID[s.SpanContext().SpanID().String()] = s
			}
			for s := tool; s != nil; s = bySpanID[s.Parent().SpanID().String()] {
				chain = append(chain, s.Name()+" ← "+s.Parent().SpanID().String())
				if s.Parent().SpanID().String() == want {
					chain = nil
					break
				}
			}
			if chain != nil {
				t.Errorf("execute_tool's ancestry %q does not reach %s", chain, want)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
