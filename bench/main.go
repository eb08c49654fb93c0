// Command bench measures toolwire side by side with the floor (a bare gRPC
// unary echo on the same server and connection) and with an MCP server
// offering the same echo tool over streamable HTTP, all in one process on
// one machine, so the ratios it prints compare like with like.
//
//	go run ./bench            # the full run, a few minutes
//	go run ./bench --quick    # a reduced run, under a minute
//
// It prints a table, writes the figures as JSON and draws them as SVG.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// scale says how much of each measurement to take.
type scale struct {
	Serial       int           // calls per system at one caller
	Callers      int           // concurrent callers for throughput
	Window       time.Duration // one system's turn at many callers
	Rounds       int           // turns per system at many callers
	LaneRuns     int           // batches per lane measurement
	InFlight     int           // calls held in flight at once
	CancelTrials int           // cancellations and timeouts measured
	Sizes        []int         // batch sizes
	SizeRuns     int           // batches per size
}

var (
	fullScale = scale{Serial: 20000, Callers: 64, Window: time.Second, Rounds: 5, LaneRuns: 20,
		InFlight: 10000, CancelTrials: 1000, Sizes: []int{1, 4, 16, 64, 256, 1024}, SizeRuns: 50}
	quickScale = scale{Serial: 3000, Callers: 64, Window: 300 * time.Millisecond, Rounds: 3, LaneRuns: 5,
		InFlight: 10000, CancelTrials: 200, Sizes: []int{1, 4, 16, 64, 256, 1024}, SizeRuns: 5}
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a reduced run of everything, under a minute")
	jsonPath := fs.String("json", "bench/results.json", "write the figures as JSON to `file` (empty: don't)")
	svgPath := fs.String("svg", "bench/results.svg", "draw the figures as SVG to `file` (empty: don't)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc := fullScale
	if *quick {
		sc = quickScale
	}
	rep, err := measure(ctx, sc, stderr)
	if err != nil {
		return err
	}
	rep.Quick = *quick
	rep.print(stdout)
	if *jsonPath != "" {
		if err := rep.writeJSON(*jsonPath); err != nil {
			return err
		}
	}
	if *svgPath != "" {
		if err := os.WriteFile(*svgPath, rep.svg(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
