// Command bench measures toolwire side by side with the floor (a bare gRPC
// unary echo on the same server and connection) and with an MCP server
// offering the same echo tool over streamable HTTP, all in one process on
// one machine, so the ratios it prints compare like with like.
//
//	go run ./bench            # the full run, a few minutes
//	go run ./bench --quick    # a reduced run, under a minute; writes no files
//
// It prints a table; a full run also writes the figures as JSON and draws
// them as SVG (bench/results.json and bench/results.svg, committed).
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
	serveStdioIfAsked()
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
	DetachRuns   int           // one-call batches per store, plain and detached, and attachments
}

var (
	fullScale = scale{Serial: 20000, Callers: 64, Window: time.Second, Rounds: 5, LaneRuns: 20,
		InFlight: 10000, CancelTrials: 1000, Sizes: []int{1, 4, 16, 64, 256, 1024}, SizeRuns: 50, DetachRuns: 2000}
	quickScale = scale{Serial: 3000, Callers: 64, Window: 300 * time.Millisecond, Rounds: 3, LaneRuns: 5,
		InFlight: 10000, CancelTrials: 200, Sizes: []int{1, 4, 16, 64, 256, 1024}, SizeRuns: 5, DetachRuns: 200}
)

// options are the command line's choices.
type options struct {
	scale     scale
	quick     bool
	json, svg string // files to write the figures to; "" writes none
	// supergateway is the command of supergateway to time in front of the
	// stdio MCP server; "" leaves its row out.
	supergateway string
}

// Where a full run writes its figures: the files the repository commits.
const (
	committedJSON = "bench/results.json"
	committedSVG  = "bench/results.svg"
)

// parseArgs reads the command line. A --quick run's figures are rough, so
// it writes no files unless --json or --svg ask for them: it must not
// replace the committed results of a full run.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a reduced run of everything, under a minute; writes no files unless --json or --svg is given")
	jsonPath := fs.String("json", committedJSON, "write the figures as JSON to `file` (empty: don't; --quick: only when given)")
	svgPath := fs.String("svg", committedSVG, "draw the figures as SVG to `file` (empty: don't; --quick: only when given)")
	sgw := fs.String("supergateway", findSupergateway(), "time MCP client → supergateway `command` → the stdio MCP server beside /mcp (default: bench/testdata/supergateway's, after npm ci there; empty: leave the row out)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := options{scale: fullScale, quick: *quick, json: *jsonPath, svg: *svgPath, supergateway: *sgw}
	if *quick {
		o.scale = quickScale
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["json"] {
			o.json = ""
		}
		if !set["svg"] {
			o.svg = ""
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	rep, err := measure(ctx, o.scale, o.supergateway, stderr)
	if err != nil {
		return err
	}
	rep.Quick = o.quick
	rep.print(stdout)
	if o.json != "" {
		if err := rep.writeJSON(o.json); err != nil {
			return err
		}
	}
	if o.svg != "" {
		if err := os.WriteFile(o.svg, rep.svg(), 0o644); err != nil {
			return err
		}
	}
	if o.quick && o.json == "" && o.svg == "" {
		fmt.Fprintf(stderr, "a --quick run writes no files; %s and %s are left as they were (add --json FILE or --svg FILE to write them)\n", committedJSON, committedSVG)
	}
	return nil
}
