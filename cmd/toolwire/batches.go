package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// The commands on a detached batch (docs/batches.md): attach, approve,
// cancel. Each names the batch by the ID its BatchAccepted gave.

// reattach is what the commands that follow a batch's events try when the
// stream drops: up to 5 times in a row, from 200ms.
const (
	reattachAttempts = 5
	reattachBackoff  = 200 * time.Millisecond
)

// runAttach prints a detached batch's events after --after-seq as protojson
// lines, then its live ones until it finishes, re-attaching after a drop.
// A batch with an error result exits with status 1, as batch does.
func runAttach(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("attach", "Each event prints as one protojson line on stdout; a dropped stream is resumed from the last event seen.", stderr)
	cf.register(fs)
	after := fs.Uint64("after-seq", 0, "print the events numbered after this one (0: all)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cmdUsageError("attach", "attach: want one BATCH_ID")
	}
	id := fs.Arg(0)
	return clientCommand(ctx, stderr, func() error {
		c, ctx, done, err := cf.dialWith(ctx, client.WithReattach(reattachAttempts, reattachBackoff))
		if err != nil {
			return err
		}
		defer done()
		return printAttached(c.Attach(ctx, id, *after), cf.explain, stdout)
	})
}

// runApprove approves (or with --deny, denies) a call held for approval.
func runApprove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("approve", "Approve a call that waits for approval (an awaiting_approval event), or deny it with --deny; the model reads --message as the denied call's result.", stderr)
	cf.register(fs)
	deny := fs.Bool("deny", false, "deny the call instead")
	message := fs.String("message", "", "why, for the model when denied, and the log")
	approver := fs.String("approver", "", "who decides, for the log (the authenticated caller is logged too)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return cmdUsageError("approve", "approve: want BATCH_ID CALL_ID")
	}
	req := &toolwirev1.ResolveApprovalRequest{BatchId: fs.Arg(0), CallId: fs.Arg(1), Approved: !*deny, Message: *message, Approver: *approver}
	return clientCommand(ctx, stderr, func() error {
		c, ctx, done, err := cf.dial(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.ToolService().ResolveApproval(ctx, req); err != nil {
			return cf.explain("approve", err)
		}
		verb := "approved"
		if *deny {
			verb = "denied"
		}
		_, err = fmt.Fprintf(stdout, "%s call %s of batch %s\n", verb, req.CallId, req.BatchId)
		return err
	})
}

// runCancel cancels a running batch.
func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("cancel", "Its calls that have not ended get CANCELLED results; the batch's stream (or attach) shows its end.", stderr)
	cf.register(fs)
	reason := fs.String("reason", "", "why, for the cancelled calls' results")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cmdUsageError("cancel", "cancel: want one BATCH_ID")
	}
	return clientCommand(ctx, stderr, func() error {
		c, ctx, done, err := cf.dial(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.ToolService().CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: fs.Arg(0), Reason: *reason}); err != nil {
			return cf.explain("cancel", err)
		}
		_, err = fmt.Fprintf(stdout, "cancelled batch %s\n", fs.Arg(0))
		return err
	})
}

// printAttached prints each event of seq as a protojson line, to the end of
// the batch; an error result among them exits with status 1. Unlike
// printEvents it expects no BatchAccepted: an attachment may start after it.
func printAttached(seq func(func(*toolwirev1.ExecuteBatchResponse, error) bool), explain func(string, error) error, stdout io.Writer) error {
	failed, n := 0, 0
	var finished bool
	for ev, err := range seq {
		if err != nil {
			return explain("attach", err)
		}
		line, err := protojson.Marshal(ev)
		if err == nil {
			_, err = fmt.Fprintf(stdout, "%s\n", line)
		}
		if err != nil {
			return err
		}
		if r := ev.GetResult(); r != nil {
			n++
			if r.GetIsError() {
				failed++
			}
		}
		finished = finished || ev.GetFinished() != nil
	}
	switch {
	case !finished:
		return errors.New("attach: the stream ended before BatchFinished")
	case failed > 0:
		return &exitError{code: 1, msg: fmt.Sprintf("%d of the %d results printed are errors", failed, n)}
	}
	return nil
}

// printEvents prints each event of seq as a protojson line; an error result
// exits with status 1.
func printEvents(seq func(func(*toolwirev1.ExecuteBatchResponse, error) bool), explain func(string, error) error, what string, stdout io.Writer) error {
	var printErr error
	events := func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for ev, err := range seq {
			if ev != nil {
				line, err := protojson.Marshal(ev)
				if err == nil {
					_, err = fmt.Fprintf(stdout, "%s\n", line)
				}
				if err != nil {
					printErr = err
					return
				}
			}
			if !yield(ev, err) {
				return
			}
		}
	}
	b, err := client.Collect(events)
	if printErr != nil {
		return printErr
	}
	if err != nil {
		return explain(what, err)
	}
	failed := 0
	for _, r := range b.Results {
		if r.GetIsError() {
			failed++
		}
	}
	if failed > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d of %d calls failed", failed, len(b.Results))}
	}
	return nil
}
