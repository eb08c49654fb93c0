package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	serveStdioIfAsked() // the stdio MCP server the measurements start is this binary
	goleak.VerifyTestMain(m,
		// net/http's idle connections end on their own after the clients close.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

var tinyScale = scale{Serial: 30, Callers: 8, Window: 30 * time.Millisecond, Rounds: 1, LaneRuns: 1,
	InFlight: 200, CancelTrials: 10, Sizes: []int{1, 16}, SizeRuns: 2, DetachRuns: 5}

// TestMeasure runs every measurement at a tiny scale and checks that each
// produced figures: every system answered, nothing failed, every section
// is filled in. It checks no speed: that is what the command reports.
func TestMeasure(t *testing.T) {
	rep, err := measure(context.Background(), tinyScale, "", &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sys := range []string{"grpc-unary", "toolwire", "toolwire-calltool", "toolwire-connect", "mcp"} {
		for _, callers := range []int{1, tinyScale.Callers} {
			row := rep.echo(sys, callers)
			if row.Calls == 0 || row.Errors != 0 || row.PerSecond <= 0 || row.Latency.P50 <= 0 {
				t.Errorf("echo %s at %d callers: %+v, want calls, no errors, a rate and a latency", sys, callers, row)
			}
		}
	}
	if len(rep.Lanes) != 2 {
		t.Fatalf("lanes: %+v, want the safe and the unsafe batch", rep.Lanes)
	}
	// Lanes are the one place where the measurement must be right by
	// construction: 64 unsafe 20 ms calls run one after another.
	if l := rep.Lanes[1]; l.Safe || l.Wall.P50 < l.Ideal {
		t.Errorf("unsafe lane: %+v, want at least %s of wall time", l, l.Ideal)
	}
	if len(rep.InFlight) != 2 {
		t.Fatalf("in flight: %+v, want batched and one-call rows", rep.InFlight)
	}
	for _, f := range rep.InFlight {
		if f.Calls != tinyScale.InFlight || f.Errors != 0 || f.HeapPerCall <= 0 {
			t.Errorf("in flight: %+v, want %d calls, no errors, some heap", f, tinyScale.InFlight)
		}
	}
	if c := rep.Cancel; c.ToToolContext.P50 <= 0 || c.ToStreamClosed.P50 < c.ToToolContext.P50 || c.TimeoutOvershoot.P99 < 0 {
		t.Errorf("cancel: %+v, want the stream to close after the tool's context ends", c)
	}
	if len(rep.Sizes) != len(tinyScale.Sizes) || rep.Sizes[1].PerCall <= 0 {
		t.Errorf("sizes: %+v", rep.Sizes)
	}
	if g := rep.Gateway; g.Direct.P50 <= 0 || g.Forwarded.P50 <= 0 || g.Surface.P50 <= 0 ||
		g.StdioDirect.P50 <= 0 || g.StdioForwarded.P50 <= 0 || g.StdioSurface.P50 <= 0 {
		t.Errorf("gateway: %+v, want the direct, the forwarded and the surface's call timed, over HTTP and stdio", g)
	}
	if len(rep.Detach) < 2 {
		t.Fatalf("detach: %+v, want memory and bolt rows", rep.Detach)
	}
	for _, d := range rep.Detach {
		if d.Plain.P50 <= 0 || d.Detached.P50 <= 0 || (d.Store != "bolt") != (d.AttachFirst.P50 > 0) {
			t.Errorf("detach: %+v, want both timed, and an attachment on every store but bolt", d)
		}
	}
	if got := len(rep.targets()); got != 10 {
		t.Errorf("%d targets checked, want 10", got)
	}
}

// TestRunWritesOutputs checks the command's outputs from a report: the
// table names every target, the JSON reads back, the SVG has every panel.
func TestRunWritesOutputs(t *testing.T) {
	rep, err := measure(context.Background(), tinyScale, "", &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.print(&table)
	for _, want := range []string{"grpc-unary", "toolwire", "toolwire-calltool", "toolwire-connect", "mcp", "sleep_unsafe", "cancel → stream closed", "1.5× bare unary", "8 KiB", "toolwire → mcp", "1.3× direct",
		"CallTool p50 ≤ 1.3× bare unary", "CallTool throughput ≥ 0.75× bare unary", "toolwire /mcp", "1.0× the go-sdk",
		"mcp stdio direct", "toolwire → mcp stdio", "MCP client → /mcp → mcp stdio", "2.5× direct stdio"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Echo) != len(rep.Echo) || back.Cancel.ToStreamClosed != rep.Cancel.ToStreamClosed {
		t.Errorf("JSON did not round-trip: %+v", back)
	}
	svg := string(rep.svg())
	if !strings.HasPrefix(svg, "<svg") || strings.Count(svg, "<rect") != 1+len(rep.Echo)+len(rep.Sizes) {
		t.Errorf("svg has %d rects, want a background and one bar per figure:\n%s", strings.Count(svg, "<rect"), svg)
	}
}

// TestSupergatewayRow times the stdio MCP server's echo through real
// supergateways (bench/testdata/supergateway, npm ci there) beside /mcp:
// both rows are filled in, printed, and checked against their target, and
// supergateway and the stdio servers it started are gone after close.
func TestSupergatewayRow(t *testing.T) {
	sg := findSupergateway()
	if sg == "" {
		testenv.Missing(t, "supergateway (npm ci in bench/testdata/supergateway)")
	}
	e, err := newEnv(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.startSupergateways(context.Background(), sg); err != nil {
		e.close()
		t.Fatal(err)
	}
	rep := report{}
	err = measureGateway(context.Background(), e, scale{Serial: 10}, &rep)
	gone := []*supergateway{e.sgStateful, e.sgDefault}
	e.close()
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]*latency{"stateful": rep.Gateway.StdioSupergateway, "default": rep.Gateway.StdioSupergatewayDefault} {
		if g == nil || g.P50 <= 0 {
			t.Errorf("supergateway %s row: %+v, want it timed", name, g)
		}
	}
	var table bytes.Buffer
	rep.print(&table)
	for _, want := range []string{"supergateway → mcp stdio", "supergateway --stateful → mcp stdio", "3× faster than supergateway"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	for _, s := range gone {
		if err := syscall.Kill(s.cmd.Process.Pid, 0); err == nil {
			t.Errorf("supergateway (pid %d) still runs after close", s.cmd.Process.Pid)
		}
		if left := testenv.Processes(s.marker); len(left) > 0 {
			t.Errorf("the stdio servers supergateway started outlived it: %v", left)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	if err := run(context.Background(), []string{"--nope"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("run accepted an unknown flag")
	}
}

// TestQuickWritesNoFiles checks that a --quick run leaves the committed
// results alone unless asked, and that a full run writes them.
func TestQuickWritesNoFiles(t *testing.T) {
	tests := []struct {
		args      []string
		json, svg string
	}{
		{nil, committedJSON, committedSVG},
		{[]string{"--quick"}, "", ""},
		{[]string{"--quick", "--json", "q.json"}, "q.json", ""},
		{[]string{"--quick", "--svg", "q.svg", "--json", "q.json"}, "q.json", "q.svg"},
		{[]string{"--json", "", "--svg", ""}, "", ""},
	}
	for _, tt := range tests {
		o, err := parseArgs(tt.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if o.json != tt.json || o.svg != tt.svg || o.quick != (len(tt.args) > 0 && tt.args[0] == "--quick") {
			t.Errorf("%q: json %q, svg %q, quick %v; want %q, %q", tt.args, o.json, o.svg, o.quick, tt.json, tt.svg)
		}
	}
	if o, _ := parseArgs([]string{"--quick"}, &bytes.Buffer{}); o.scale.Serial != quickScale.Serial {
		t.Errorf("--quick runs at scale %+v; want the quick scale", o.scale)
	}
}

// BenchmarkMCP times each MCP path of the bench alone, for profiles
// (-cpuprofile, -memprofile); the command's own measurement alternates
// them, for ratios:
//
//	go test -run NONE -bench MCP/surface-stdio -cpuprofile cpu.out ./bench
func BenchmarkMCP(b *testing.B) {
	e, err := newEnv(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer e.close()
	for _, s := range []struct {
		name string
		call func(context.Context) error
	}{
		{"direct-http", e.mcpEcho},
		{"forwarded-http", e.gatewayEcho},
		{"surface", e.surfaceEcho},
		{"direct-stdio", e.stdioEcho},
		{"forwarded-stdio", e.gatewayStdioEcho},
		{"surface-stdio", e.surfaceStdioEcho},
	} {
		b.Run(s.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.call(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGatewayRatios runs the command's MCP measurement alone (the paths
// alternating in blocks) and reports each path's p50 against its direct
// call:
//
//	go test -run NONE -bench GatewayRatios -benchtime 1x ./bench
func BenchmarkGatewayRatios(b *testing.B) {
	e, err := newEnv(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer e.close()
	if sg := findSupergateway(); sg != "" {
		if err := e.startSupergateways(context.Background(), sg); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		var rep report
		if err := measureGateway(context.Background(), e, scale{Serial: 3000}, &rep); err != nil {
			b.Fatal(err)
		}
		g := rep.Gateway
		b.ReportMetric(float64(g.StdioDirect.P50.Microseconds()), "stdio-direct-µs")
		b.ReportMetric(float64(g.StdioSurface.P50)/float64(g.StdioDirect.P50), "mcp-in-front-of-stdio/direct")
		b.ReportMetric(float64(g.StdioForwarded.P50)/float64(g.StdioDirect.P50), "grpc-to-stdio/direct")
		b.ReportMetric(float64(g.Direct.P50.Microseconds()), "http-direct-µs")
		b.ReportMetric(float64(g.Forwarded.P50)/float64(g.Direct.P50), "grpc-to-http/direct")
		b.ReportMetric(float64(g.Surface.P50)/float64(g.Direct.P50), "surface/sdk-server")
		if sg := g.StdioSupergateway; sg != nil {
			b.ReportMetric(float64(sg.P50)/float64(g.StdioSurface.P50), "supergateway-stateful/mcp-in-front-of-stdio")
		}
		if sg := g.StdioSupergatewayDefault; sg != nil {
			b.ReportMetric(float64(sg.P50)/float64(g.StdioSurface.P50), "supergateway/mcp-in-front-of-stdio")
		}
	}
}
