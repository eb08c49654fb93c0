package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// report is everything one run measured; it is also the JSON written.
type report struct {
	Go       string         `json:"go"`
	CPUs     int            `json:"cpus"`
	Quick    bool           `json:"quick"`
	Callers  int            `json:"callers"`
	Echo     []echoRow      `json:"echo"`
	Lanes    []laneRow      `json:"lanes"`
	InFlight []inFlightRow  `json:"in_flight"`
	Cancel   cancelFigures  `json:"cancel"`
	Sizes    []sizeRow      `json:"batch_sizes"`
	Gateway  gatewayFigures `json:"gateway"`
	Detach   []detachRow    `json:"detach"`
}

// gatewayFigures compare an MCP tool called directly with the go-sdk
// client, forwarded through toolwire's MCP gateway, and toolwire's own
// echo called with the same client through toolwire's MCP surface (/mcp);
// then the same echo served over stdio by a child process, called
// directly, forwarded through toolwire's gRPC port, and called through /mcp,
// and through supergateway when the run had it.
type gatewayFigures struct {
	Direct    latency `json:"direct"`
	Forwarded latency `json:"forwarded"`
	Surface   latency `json:"surface"`

	StdioDirect    latency `json:"stdio_direct"`
	StdioForwarded latency `json:"stdio_forwarded"`
	StdioSurface   latency `json:"stdio_surface"`

	// supergateway --stateful at 2025-11-25 (alternated with the others),
	// and as its README starts it (a few calls).
	StdioSupergateway        *latency `json:"stdio_supergateway,omitempty"`
	StdioSupergatewayDefault *latency `json:"stdio_supergateway_default,omitempty"`
}

type echoRow struct {
	System    string  `json:"system"`
	Callers   int     `json:"callers"`
	Calls     int     `json:"calls"`
	Errors    int64   `json:"errors"`
	Latency   latency `json:"latency"`
	PerSecond float64 `json:"calls_per_second"`
}

type laneRow struct {
	Tool  string        `json:"tool"`
	Calls int           `json:"calls"`
	Safe  bool          `json:"safe"`
	Ideal time.Duration `json:"ideal_ns"`
	Wall  latency       `json:"wall"`
}

type inFlightRow struct {
	Calls         int     `json:"calls"`
	CallsPerBatch int     `json:"calls_per_batch"`
	Goroutines    int     `json:"goroutines"`
	HeapPerCall   float64 `json:"heap_bytes_per_call"`
	Errors        int64   `json:"errors"`
}

type cancelFigures struct {
	ToToolContext    latency       `json:"cancel_to_tool_context"`
	ToStreamClosed   latency       `json:"cancel_to_stream_closed"`
	Timeout          time.Duration `json:"timeout_ns"`
	TimeoutOvershoot latency       `json:"timeout_overshoot"`
}

type sizeRow struct {
	Calls   int           `json:"calls"`
	Batch   latency       `json:"batch"`
	PerCall time.Duration `json:"per_call_ns"`
}

// echo returns the row of system at callers, or a zero row.
func (r *report) echo(system string, callers int) echoRow {
	for _, e := range r.Echo {
		if e.System == system && e.Callers == callers {
			return e
		}
	}
	return echoRow{}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// target is one of the targets, checked against this run.
type target struct {
	what     string
	measured string
	met      bool
}

func (r *report) targets() []target {
	unary, tw := r.echo("grpc-unary", 1), r.echo("toolwire", 1)
	p50 := ratio(float64(tw.Latency.P50), float64(unary.Latency.P50))
	thr := ratio(r.echo("toolwire", r.Callers).PerSecond, r.echo("mcp", r.Callers).PerSecond)
	ct, many := r.echo("toolwire-calltool", 1), r.echo("toolwire-calltool", r.Callers)
	ctP50 := ratio(float64(ct.Latency.P50), float64(unary.Latency.P50))
	ctThr := ratio(many.PerSecond, r.echo("grpc-unary", r.Callers).PerSecond)
	ts := []target{
		{"one-call p50 ≤ 1.5× bare unary", fmt.Sprintf("%.2f×", p50), p50 > 0 && p50 <= 1.5},
		{fmt.Sprintf("throughput ≥ 15× MCP at %d callers", r.Callers), fmt.Sprintf("%.1f×", thr), thr >= 15},
		{"CallTool p50 ≤ 1.3× bare unary", fmt.Sprintf("%.2f×", ctP50), ctP50 > 0 && ctP50 <= 1.3},
		{fmt.Sprintf("CallTool throughput ≥ 0.75× bare unary at %d callers", r.Callers),
			fmt.Sprintf("%.2f× (%.1f× MCP)", ctThr, ratio(many.PerSecond, r.echo("mcp", r.Callers).PerSecond)), ctThr >= 0.75},
	}
	for _, l := range r.Lanes {
		if l.Safe {
			ts = append(ts, target{fmt.Sprintf("%d safe %s calls ≤ 25ms", l.Calls, l.Ideal), l.Wall.P50.Round(10 * time.Microsecond).String(), l.Wall.P50 <= 25*time.Millisecond})
		}
	}
	for _, f := range r.InFlight {
		if f.CallsPerBatch > 1 {
			ts = append(ts, target{"≤ 8 KiB heap per in-flight call", fmt.Sprintf("%.1f KiB", f.HeapPerCall/1024), f.HeapPerCall <= 8*1024})
		}
	}
	p99 := r.Cancel.ToStreamClosed.P99
	ts = append(ts, target{"cancel p99 ≤ 5ms", p99.Round(time.Microsecond).String(), p99 <= 5*time.Millisecond})
	fwd := ratio(float64(r.Gateway.Forwarded.P50), float64(r.Gateway.Direct.P50))
	ts = append(ts, target{"forwarded MCP call p50 ≤ 1.3× direct", fmt.Sprintf("%.2f×", fwd), fwd > 0 && fwd <= 1.3})
	srf := ratio(float64(r.Gateway.Surface.P50), float64(r.Gateway.Direct.P50))
	ts = append(ts, target{"toolwire /mcp call p50 ≤ 1.0× the go-sdk's server", fmt.Sprintf("%.2f×", srf), srf > 0 && srf <= 1.0})
	mim := ratio(float64(r.Gateway.StdioSurface.P50), float64(r.Gateway.StdioDirect.P50))
	ts = append(ts, target{"MCP client → /mcp → stdio MCP server p50 ≤ 2.5× direct stdio", fmt.Sprintf("%.2f×", mim), mim > 0 && mim <= 2.5})
	if sg, st := r.Gateway.StdioSupergatewayDefault, r.Gateway.StdioSupergateway; sg != nil && st != nil {
		f := ratio(float64(sg.P50), float64(r.Gateway.StdioSurface.P50))
		fs := ratio(float64(st.P50), float64(r.Gateway.StdioSurface.P50))
		ts = append(ts, target{"/mcp in front of stdio p50 ≥ 3× faster than supergateway's", fmt.Sprintf("%.0f× (--stateful: %.2f×)", f, fs), f >= 3})
	}
	return ts
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	us := func(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d)/1e3) }
	fmt.Fprintf(tw, "echo (%s, %d CPUs)\tcallers\tp50\tp99\tcalls/s\tp50 ×unary\tcalls/s ×unary\tcalls/s ×mcp\t\n", r.Go, r.CPUs)
	for _, e := range r.Echo {
		u, m := r.echo("grpc-unary", e.Callers), r.echo("mcp", e.Callers)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t\n", e.System, e.Callers, us(e.Latency.P50), us(e.Latency.P99), e.PerSecond,
			ratio(float64(e.Latency.P50), float64(u.Latency.P50)), ratio(e.PerSecond, u.PerSecond), ratio(e.PerSecond, m.PerSecond))
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "lanes\tcalls\twall p50\twall p99\tideal\t×ideal\t\t\t\n")
	for _, l := range r.Lanes {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.2f\t\t\t\n", l.Tool, l.Calls, l.Wall.P50.Round(10*time.Microsecond), l.Wall.P99.Round(10*time.Microsecond),
			l.Ideal, ratio(float64(l.Wall.P50), float64(l.Ideal)))
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "in flight\tcalls\tper batch\theap/call\tgoroutines\terrors\t\t\t\n")
	for _, f := range r.InFlight {
		fmt.Fprintf(tw, "block\t%d\t%d\t%.1f KiB\t%d\t%d\t\t\t\n", f.Calls, f.CallsPerBatch, f.HeapPerCall/1024, f.Goroutines, f.Errors)
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "cancellation\tp50\tp99\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "cancel → tool context done\t%s\t%s\t\t\t\t\t\t\n", us(r.Cancel.ToToolContext.P50), us(r.Cancel.ToToolContext.P99))
	fmt.Fprintf(tw, "cancel → stream closed\t%s\t%s\t\t\t\t\t\t\n", us(r.Cancel.ToStreamClosed.P50), us(r.Cancel.ToStreamClosed.P99))
	fmt.Fprintf(tw, "%s timeout overshoot\t%s\t%s\t\t\t\t\t\t\n", r.Cancel.Timeout, us(r.Cancel.TimeoutOvershoot.P50), us(r.Cancel.TimeoutOvershoot.P99))
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "batch size\tbatch p50\tper call\t×size 1\t\t\t\t\t\n")
	for _, s := range r.Sizes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t\t\t\t\t\n", s.Calls, us(s.Batch.P50), us(s.PerCall), ratio(float64(s.PerCall), float64(r.Sizes[0].PerCall)))
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "MCP gateway and surface\tp50\tp99\t×direct\t\t\t\t\t\n")
	g := r.Gateway
	fmt.Fprintf(tw, "mcp direct\t%s\t%s\t\t\t\t\t\t\n", us(g.Direct.P50), us(g.Direct.P99))
	fmt.Fprintf(tw, "toolwire → mcp\t%s\t%s\t%.2f\t\t\t\t\t\n", us(g.Forwarded.P50), us(g.Forwarded.P99), ratio(float64(g.Forwarded.P50), float64(g.Direct.P50)))
	fmt.Fprintf(tw, "toolwire /mcp\t%s\t%s\t%.2f\t\t\t\t\t\n", us(g.Surface.P50), us(g.Surface.P99), ratio(float64(g.Surface.P50), float64(g.Direct.P50)))
	fmt.Fprintf(tw, "mcp stdio direct\t%s\t%s\t\t\t\t\t\t\n", us(g.StdioDirect.P50), us(g.StdioDirect.P99))
	fmt.Fprintf(tw, "toolwire → mcp stdio\t%s\t%s\t%.2f\t\t\t\t\t\n", us(g.StdioForwarded.P50), us(g.StdioForwarded.P99), ratio(float64(g.StdioForwarded.P50), float64(g.StdioDirect.P50)))
	fmt.Fprintf(tw, "MCP client → /mcp → mcp stdio\t%s\t%s\t%.2f\t\t\t\t\t\n", us(g.StdioSurface.P50), us(g.StdioSurface.P99), ratio(float64(g.StdioSurface.P50), float64(g.StdioDirect.P50)))
	if sg := g.StdioSupergatewayDefault; sg != nil {
		fmt.Fprintf(tw, "supergateway → mcp stdio\t%s\t%s\t%.2f\t\t\t\t\t\n", us(sg.P50), us(sg.P99), ratio(float64(sg.P50), float64(g.StdioDirect.P50)))
	}
	if sg := g.StdioSupergateway; sg != nil {
		fmt.Fprintf(tw, "supergateway --stateful → mcp stdio\t%s\t%s\t%.2f\t\t\t\t\t\n", us(sg.P50), us(sg.P99), ratio(float64(sg.P50), float64(g.StdioDirect.P50)))
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "detached batches (one echo)\tplain p50\tdetach p50\t×plain\tattach on B: first event p50\t\t\t\t\n")
	for _, d := range r.Detach {
		first := "(one process)"
		if d.AttachFirst.P50 > 0 {
			first = us(d.AttachFirst.P50)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t\t\t\t\n", d.Store, us(d.Plain.P50), us(d.Detached.P50), ratio(float64(d.Detached.P50), float64(d.Plain.P50)), first)
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t\n")
	fmt.Fprintf(tw, "target\tmeasured\tmet\t\t\t\t\t\t\n")
	for _, t := range r.targets() {
		met := "yes"
		if !t.met {
			met = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\t\t\t\n", t.what, t.measured, met)
	}
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
