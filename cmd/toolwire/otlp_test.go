package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// otelcolVar names the OpenTelemetry Collector binary the OTLP test exports
// to; deploy/otelcol/build.sh builds it and .ci/run sets it.
const otelcolVar = "TOOLWIRE_TEST_OTELCOL"

// collectorConfig receives OTLP over HTTP and over gRPC on two loopback
// ports and writes traces and metrics as OTLP JSON lines, one file each.
const collectorConfig = `
receivers:
  otlp:
    protocols:
      http:
        endpoint: %[1]s
      grpc:
        endpoint: %[4]s
exporters:
  file/traces:
    path: %[2]s
    flush_interval: 100ms
  file/metrics:
    path: %[3]s
    flush_interval: 100ms
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file/traces]
    metrics:
      receivers: [otlp]
      exporters: [file/metrics]
`

// collector is a running OpenTelemetry Collector.
type collector struct {
	endpoint             string // host:port of its OTLP/HTTP receiver
	grpcEndpoint         string // host:port of its OTLP/gRPC receiver
	tracesFile, metricsF string
}

// startCollector runs the collector from otelcolVar on a free loopback port
// until the test ends.
func startCollector(t *testing.T) *collector {
	t.Helper()
	bin := os.Getenv(otelcolVar)
	if bin == "" {
		testenv.Missing(t, "an OpenTelemetry Collector ("+otelcolVar+"; deploy/otelcol/build.sh builds one)")
	}
	endpoint, grpcEndpoint := testenv.FreePort(t), testenv.FreePort(t)
	dir := t.TempDir()
	c := &collector{endpoint: endpoint, grpcEndpoint: grpcEndpoint, tracesFile: filepath.Join(dir, "traces.jsonl"), metricsF: filepath.Join(dir, "metrics.jsonl")}
	cfg := writeFile(t, "otelcol.yaml", fmt.Sprintf(collectorConfig, endpoint, c.tracesFile, c.metricsF, grpcEndpoint))

	cmd := exec.Command(bin, "--config", cfg)
	stderr := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(testTimeout):
			cmd.Process.Kill()
			<-exited
		}
	})
	waitFor(t, "the collector to listen", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the collector exited: %v\n%s", err, stderr)
		default:
		}
		for _, e := range []string{endpoint, grpcEndpoint} {
			conn, err := net.Dial("tcp", e)
			if err != nil {
				return false
			}
			conn.Close()
		}
		return true
	})
	return c
}

// otlpSpan is a span as the collector's file exporter writes it (OTLP JSON).
type otlpSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Attributes   []struct {
		Key   string `json:"key"`
		Value struct {
			String string `json:"stringValue"`
		} `json:"value"`
	} `json:"attributes"`
	Status struct {
		Code int `json:"code"`
	} `json:"status"`
	service string
}

func (s otlpSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.String
		}
	}
	return ""
}

// OTLP span kinds.
const (
	kindInternal = 1
	kindServer   = 2
	kindClient   = 3
)

// readSpans parses the collector's traces file.
func readSpans(t *testing.T, path string) []otlpSpan {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var spans []otlpSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var data struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []struct {
						Key   string `json:"key"`
						Value struct {
							String string `json:"stringValue"`
						} `json:"value"`
					} `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &data); err != nil {
			continue // a line being written
		}
		for _, rs := range data.ResourceSpans {
			var svc string
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					svc = a.Value.String
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.service = svc
					spans = append(spans, s)
				}
			}
		}
	}
	return spans
}

// TestOTLPExport runs the real toolwire binary exporting by the standard
// OTEL_* variables to a real OpenTelemetry Collector, drives a batch from an
// instrumented client that exports to the same collector, and checks that
// the spans arrived linked: agent turn → client RPC → server RPC →
// execute_batch → execute_tool, in one trace across both processes; and that
// the metrics arrived too. It does so for both OTLP protocols, set as
// docs/deploy.md sets them: http/protobuf to the collector's HTTP port, and
// grpc to its gRPC port (OTLP's 4317 in a cluster).
func TestOTLPExport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a collector")
	}
	bin := buildToolwire(t)
	t.Parallel()
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			col := startCollector(t)
			endpoint := col.endpoint
			if protocol == "grpc" {
				endpoint = col.grpcEndpoint
			}
			checkOTLPExport(t, bin, col, endpoint, protocol)
		})
	}
}

// checkOTLPExport runs the toolwire binary bin exporting to endpoint of col
// with protocol, and checks what arrives (see TestOTLPExport).
func checkOTLPExport(t *testing.T, bin string, col *collector, endpoint, protocol string) {
	cmd := exec.Command(bin, "serve", "--diag", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(),
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL="+protocol,
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=otlp",
		"OTEL_SERVICE_NAME=toolwire-e2e",
	)
	serve := startChild(t, cmd)
	addr := serve.addr

	// The agent's side: its own tracer provider exporting to the collector.
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL("http://"+col.endpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("agent"))))
	c, err := client.New(addr, client.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	turnCtx, turn := tp.Tracer("agent").Start(ctx, "agent turn")
	b, err := client.Collect(c.ExecuteBatch(turnCtx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		{CallId: "e1", Name: "echo", Arguments: `{"text":"traced"}`},
		{CallId: "f1", Name: "fail", Arguments: `{"message":"no"}`},
	}}))
	turn.End()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil { // flushes the agent's spans
		t.Fatal(err)
	}
	// SIGTERM: serve drains, then flushes its spans and metrics on the way out.
	if log, err := serve.stop(t); err != nil {
		t.Fatalf("toolwire serve after SIGTERM: %v\n%s", err, log)
	}

	traceID := turn.SpanContext().TraceID().String()
	var spans []otlpSpan
	byName := map[string]otlpSpan{}
	waitFor(t, "the trace's spans in the collector's output", func() bool {
		spans = readSpans(t, col.tracesFile)
		clear(byName)
		for _, s := range spans {
			if s.TraceID == traceID {
				byName[s.service+" "+s.Name] = s
			}
		}
		return len(byName) >= 6
	})

	const rpc = "toolwire.v1.ToolService/ExecuteBatch"
	chain := []struct {
		key, parentKey string
		kind           int
	}{
		{"agent " + rpc, "agent agent turn", kindClient},
		{"toolwire-e2e " + rpc, "agent " + rpc, kindServer},
		{"toolwire-e2e execute_batch", "toolwire-e2e " + rpc, kindInternal},
		{"toolwire-e2e execute_tool echo", "toolwire-e2e execute_batch", kindInternal},
		{"toolwire-e2e execute_tool fail", "toolwire-e2e execute_batch", kindInternal},
	}
	for _, link := range chain {
		s, ok := byName[link.key]
		parent, pok := byName[link.parentKey]
		if !ok || !pok {
			t.Errorf("span %q or its parent %q did not arrive; spans of the trace: %v", link.key, link.parentKey, keys(byName))
			continue
		}
		if s.ParentSpanID != parent.SpanID || s.Kind != link.kind {
			t.Errorf("%q: parent %s, kind %d; want parent %q (%s), kind %d", link.key, s.ParentSpanID, s.Kind, link.parentKey, parent.SpanID, link.kind)
		}
	}
	if s := byName["toolwire-e2e execute_batch"]; s.attr("toolwire.batch.id") != b.Accepted.GetBatchId() {
		t.Errorf("execute_batch's toolwire.batch.id %q; want %q", s.attr("toolwire.batch.id"), b.Accepted.GetBatchId())
	}
	if s := byName["toolwire-e2e execute_tool fail"]; s.attr("error.type") != "tool_error" || s.attr("gen_ai.tool.call.id") != "f1" || s.Status.Code != 2 {
		t.Errorf("execute_tool fail: error.type %q, call id %q, status %d; want tool_error, f1, 2 (error)",
			s.attr("error.type"), s.attr("gen_ai.tool.call.id"), s.Status.Code)
	}

	waitFor(t, "the metrics in the collector's output", func() bool {
		m, err := os.ReadFile(col.metricsF)
		return err == nil && strings.Contains(string(m), `"gen_ai.execute_tool.duration"`)
	})
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
