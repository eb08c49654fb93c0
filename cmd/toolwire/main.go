// Command toolwire runs the toolwire server and talks to one.
//
//	toolwire serve [flags]           serve the ToolService over gRPC
//	toolwire tools [flags]           list the tools a server offers
//	toolwire call [flags] NAME JSON  run one call and print its result
//	toolwire batch [flags] FILE      run a batch of calls, printing its events
//	toolwire attach [flags] BATCH_ID print a detached batch's events
//	toolwire approve [flags] BATCH_ID CALL_ID   approve (or --deny) a held call
//	toolwire cancel [flags] BATCH_ID cancel a running batch
//
// Run "toolwire COMMAND -h" for a command's flags.
//
// It composes the feature packages (their Configs, the store, the engine's
// gRPC surface, the sources, the sandbox, telemetry) and holds none of their
// logic; no package imports it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		hideArgs()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the default handling returns, so a second one
	// ends the process at once instead of waiting for serve to drain.
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.msg != "" {
			fmt.Fprintln(os.Stderr, "toolwire:", err)
		}
		os.Exit(exitCode(err))
	}
}
