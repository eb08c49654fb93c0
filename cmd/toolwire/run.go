package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage: toolwire COMMAND [flags] [args]

commands:
  serve   serve the ToolService over gRPC
  tools   list the tools a server offers
  call    run one call: toolwire call [flags] NAME [JSON]
  batch   run a batch of calls from a JSON file: toolwire batch [flags] FILE|-

Run "toolwire COMMAND -h" for a command's flags.
`

// exitError ends the program with a given exit code. An empty msg means
// everything worth saying has been printed already.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.msg
}

// usageError is a mistake on the command line; it exits with status 2.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, args...)}
}

// exitCode returns the exit status err asks for: 0 for nil, the code of an
// exitError, 1 for anything else.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		return 1
	}
}

// run runs the command line args (without the program name) until it is
// done or ctx is.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: 2}
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, args, stderr)
	case "tools":
		return runTools(ctx, args, stdout, stderr)
	case "call":
		return runCall(ctx, args, stdout, stderr)
	case "batch":
		return runBatch(ctx, args, os.Stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError("unknown command %q", cmd)
	}
}

// parseFlags parses args with fs, mapping -h to success and other mistakes
// to a usage error (fs has printed them).
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return true, nil
	case err != nil:
		return false, &exitError{code: 2}
	}
	return false, nil
}
