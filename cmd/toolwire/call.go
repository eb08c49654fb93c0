package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// runCall runs one call, printing its progress to stderr as it streams and
// then its result text to stdout. An error result exits with status 1.
func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: toolwire call [flags] NAME [JSON]")
		fs.PrintDefaults()
	}
	cf.register(fs)
	id := fs.String("id", "call-1", "the call's `ID`")
	callTimeout := fs.Duration("call-timeout", 0, "the call's own timeout (0: the tool's or server's)")
	session := fs.String("session", "", "session `ID` the call belongs to")
	idemKey := fs.String("idempotency-key", "", "the call's idempotency `key`: a call with a key that completed before is replayed, not run")
	asJSON := fs.Bool("json", false, "print the whole CallResult as protojson instead of its text")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return usageError("call: want a tool name and optionally its arguments as JSON")
	}
	call := client.Call(*id, fs.Arg(0), fs.Arg(1))
	if *callTimeout > 0 {
		call.Timeout = durationpb.New(*callTimeout)
	}
	call.IdempotencyKey = *idemKey

	c, ctx, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call}, SessionId: *session}
	b, err := client.Collect(showProgress(c.ExecuteBatch(ctx, req), stderr))
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	r := b.Results[0]
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true}.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		text := client.Text(r)
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		io.WriteString(stdout, text)
		if s := r.GetStructuredContent(); s != "" && strings.TrimSpace(s) != strings.TrimSpace(client.Text(r)) {
			fmt.Fprintf(stderr, "structured content: %s\n", s)
		}
	}
	if r.GetReplayed() {
		fmt.Fprintln(stderr, "replayed from the idempotency store; the tool did not run again")
	}
	if r.GetTruncated() {
		fmt.Fprintf(stderr, "the result was truncated from %d bytes\n", r.GetOriginalSize())
	}
	if r.GetIsError() {
		fmt.Fprintf(stderr, "%s failed: %s\n", r.GetToolName(), r.GetErrorKind())
		return &exitError{code: 1}
	}
	return nil
}

// showProgress passes events through, describing starts and progress on w
// as they arrive.
func showProgress(seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error], w io.Writer) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	return func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for ev, err := range seq {
			switch e := ev.GetEvent().(type) {
			case *toolwirev1.ExecuteBatchResponse_Started:
				fmt.Fprintf(w, "started %s\n", e.Started.GetCallId())
			case *toolwirev1.ExecuteBatchResponse_Progress:
				p := e.Progress
				if p.Output != "" {
					io.WriteString(w, p.Output)
				}
				if p.Progress != nil || p.Message != "" {
					fmt.Fprintf(w, "progress %s%s\n", fraction(p), p.Message)
				}
			case *toolwirev1.ExecuteBatchResponse_Result:
				fmt.Fprintf(w, "finished %s in %s\n", e.Result.GetCallId(), e.Result.GetDuration().AsDuration().Round(time.Millisecond))
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

// fraction formats "progress/total: ", or "" when no progress is reported.
func fraction(p *toolwirev1.CallProgress) string {
	switch {
	case p.Progress == nil:
		return ""
	case p.Total == nil:
		return fmt.Sprintf("%g: ", p.GetProgress())
	default:
		return fmt.Sprintf("%g/%g: ", p.GetProgress(), p.GetTotal())
	}
}
