package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// commands are toolwire's commands, in the order usage lists them; each
// one's summary also opens its -h text.
var commands = []struct{ name, args, summary string }{
	{"serve", "", "Serve the ToolService over gRPC."},
	{"tools", "", "List the tools a toolwire server offers."},
	{"call", "NAME [JSON]", "Run one tool call on a toolwire server and print its result."},
	{"batch", "FILE|-", "Run a batch of tool calls from a JSON file on a toolwire server, printing its events."},
	{"attach", "BATCH_ID", "Print a detached batch's events, then its live ones until it finishes."},
	{"approve", "BATCH_ID CALL_ID", "Approve or deny a call of a batch that waits for approval."},
	{"cancel", "BATCH_ID", "Cancel a running batch."},
}

// usage is the top-level help text.
var usage = func() string {
	var b strings.Builder
	b.WriteString("toolwire runs the tool calls of LLM agents: a gRPC server, and a client for it.\n\n")
	b.WriteString("usage: toolwire COMMAND [flags] [args]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-7s  %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun \"toolwire COMMAND -h\" for a command's flags.\n")
	return b.String()
}()

// newFlagSet returns the flag set of command name, writing to stderr. Its
// -h text opens with the command's one-line summary, then its synopsis,
// then more (when not empty), then the flags.
func newFlagSet(name, more string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	i := slices.IndexFunc(commands, func(c struct{ name, args, summary string }) bool { return c.name == name })
	c := commands[i]
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s\n\nusage: %s\n", c.summary, strings.TrimSpace("toolwire "+c.name+" [flags] "+c.args))
		if more != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(more))
		}
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

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

// cmdUsageError is a mistake on command cmd's command line: the error, then
// where help is, rather than the whole -h text.
func cmdUsageError(cmd, format string, args ...any) error {
	return usageError("%s\nrun \"toolwire %s -h\" for help", fmt.Sprintf(format, args...), cmd)
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
	case "attach":
		return runAttach(ctx, args, stdout, stderr)
	case "approve":
		return runApprove(ctx, args, stdout, stderr)
	case "cancel":
		return runCancel(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError("unknown command %q", cmd)
	}
}

// flagParseError is err, an error of fs.Parse, saying what the flag
// wants where the flag package says only "parse error": --call-timeout 30
// gave `invalid value "30" for flag -call-timeout: parse error`, where the
// config file's call_timeout: 30 says to write "30s".
func flagParseError(fs *flag.FlagSet, err error) error {
	m := flagParseErr.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	f := fs.Lookup(m[1])
	if f == nil {
		return err
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = `want a duration such as "30s" or "1m30s"`
	case int, int64, uint, uint64:
		want = "want an integer"
	case float64:
		want = "want a number"
	case bool:
		want = "want true or false"
	default:
		return err
	}
	return fmt.Errorf("%s%s", strings.TrimSuffix(err.Error(), "parse error"), want)
}

// flagParseErr matches the flag package's error for a value its flag's
// type cannot parse, naming the flag.
var flagParseErr = regexp.MustCompile(`^invalid (?:boolean )?value ".*" for (?:flag )?-([^:]+): parse error$`)

// parseFlags parses args with fs, mapping -h to success (after printing
// fs's -h text) and other mistakes to a usage error that names the mistake
// and where help is; the flag package alone would print the mistake, then
// every flag. Flags may come after the arguments too ("call read_file
// --addr host '{}'"), as users type them; "--" ends the flags. fs.Args()
// returns the arguments afterwards.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	var positional []string
	for {
		switch err := fs.Parse(args); {
		case errors.Is(err, flag.ErrHelp):
			fs.SetOutput(out)
			usage()
			return true, nil
		case err != nil:
			return false, cmdUsageError(fs.Name(), "%s: %v", fs.Name(), flagParseError(fs, err))
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" || len(rest) == 0 {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Parse again with only the arguments, behind "--", so fs.Args()
	// returns them; the flags already set keep their values.
	_ = fs.Parse(append([]string{"--"}, positional...))
	return false, nil
}
