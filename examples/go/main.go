// Package main is toolwire's agent-loop example in Go, and the Go runner of
// the conformance scenario in examples/scenario.json: a scripted model (no LLM)
// whose tool calls, in OpenAI's format, go through toolwire's client package
// as batches, and whose results come back as OpenAI tool messages.
//
// Against a running `toolwire serve --diag`:
//
//	go run ./examples/go [-addr 127.0.0.1:50051] [-scenario examples/scenario.json] [-v]
//
// It exits 1 if the server's answers differ from the scenario.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/toolwire/toolwire/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	addr := fs.String("addr", cmp.Or(os.Getenv("TOOLWIRE_ADDR"), "127.0.0.1:50051"), "toolwire server address (default $TOOLWIRE_ADDR)")
	path := fs.String("scenario", "examples/scenario.json", "scenario file")
	verbose := fs.Bool("v", false, "print the final chat request (OpenAI messages and tools)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := LoadScenario(*path)
	if err != nil {
		return err
	}
	c, err := client.New(*addr)
	if err != nil {
		return err
	}
	defer c.Close()

	chat, mismatches := Run(ctx, c, s)
	if *verbose {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(chat); err != nil {
			return err
		}
	}
	for _, m := range mismatches {
		fmt.Fprintln(stdout, "MISMATCH", m)
	}
	if len(mismatches) > 0 {
		return fmt.Errorf("%d mismatches with %s", len(mismatches), *path)
	}
	fmt.Fprintf(stdout, "scenario passed: %d steps, %d messages in the conversation\n", len(s.Steps), len(chat.Messages))
	return nil
}
