package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/configfile"
	"google.golang.org/protobuf/types/known/durationpb"
)

// batchCall is one call in a batch file. Arguments is a JSON object, or a
// JSON string holding the arguments text as a model would send it.
type batchCall struct {
	CallID         string               `json:"call_id"` // default: the call's index
	Name           string               `json:"name"`
	Arguments      json.RawMessage      `json:"arguments"`
	Timeout        *configfile.Duration `json:"timeout"` // such as "5s"
	IdempotencyKey string               `json:"idempotency_key"`
}

// batchFileShape says what a batch file holds.
const batchFileShape = `a JSON array of calls, such as
  [{"call_id":"a","name":"echo","arguments":{"text":"hi"}},
   {"call_id":"b","name":"sleep","arguments":"{\"ms\":100}","timeout":"5s"}]`

// runBatch runs the calls of a JSON file (or stdin for "-"), printing each
// event as one protojson line as it arrives. A batch with an error result
// exits with status 1.
func runBatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("batch", "FILE is "+batchFileShape+`
Each event prints as one protojson line on stdout as it arrives.`, stderr)
	cf.register(fs)
	opts := &toolwirev1.BatchOptions{}
	fs.BoolVar(&opts.Sequential, "sequential", false, "run every call alone, one after another")
	maxParallel := fs.Uint("max-parallel", 0, "most calls running at once in a parallel lane (0: the server's limit)")
	fs.BoolVar(&opts.StopOnError, "stop-on-error", false, "skip the lanes after a failed call")
	batchTimeout := fs.Duration("batch-timeout", 0, "deadline for the whole batch, enforced by the server (0: none)")
	session := fs.String("session", "", "session `ID` the calls belong to")
	fs.BoolVar(&opts.Detach, "detach", false, "the batch runs on when the stream ends; a dropped stream is resumed (see toolwire attach)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cmdUsageError("batch", "batch: want one FILE, or - for stdin")
	}
	opts.MaxParallel = uint32(*maxParallel)
	if *batchTimeout > 0 {
		opts.Timeout = durationpb.New(*batchTimeout)
	}
	calls, err := readBatchFile(fs.Arg(0), stdin)
	if err != nil {
		return err
	}

	req := &toolwirev1.ExecuteBatchRequest{Calls: calls, SessionId: *session, Options: opts}
	return clientCommand(ctx, stderr, func() error {
		var copts []client.Option
		if opts.Detach {
			copts = append(copts, client.WithReattach(reattachAttempts, reattachBackoff))
		}
		c, ctx, done, err := cf.dialWith(ctx, copts...)
		if err != nil {
			return err
		}
		defer done()
		return sendBatch(ctx, c, req, cf.explain, stdout)
	})
}

// sendBatch runs req, printing each event as a protojson line on stdout.
func sendBatch(ctx context.Context, c *client.Client, req *toolwirev1.ExecuteBatchRequest, explain func(string, error) error, stdout io.Writer) error {
	return printEvents(c.ExecuteBatch(ctx, req), explain, "batch", stdout)
}

// readBatchFile reads the calls of a batch file; "-" reads stdin.
func readBatchFile(path string, stdin io.Reader) ([]*toolwirev1.ToolCall, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, fmt.Errorf("batch file %s: want %s", path, batchFileShape)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(data, &elems); err != nil {
		return nil, fmt.Errorf("batch file %s: %w", path, err)
	}
	calls := make([]*toolwirev1.ToolCall, len(elems))
	for i, elem := range elems {
		bc, err := decodeBatchCall(elem)
		if err != nil {
			return nil, fmt.Errorf("batch file %s: call %d: %w", path, i, err)
		}
		args, err := argumentsText(bc.Arguments)
		if err != nil {
			return nil, fmt.Errorf("batch file %s: call %d: arguments: %w", path, i, err)
		}
		id := bc.CallID
		if id == "" {
			id = strconv.Itoa(i)
		}
		calls[i] = &toolwirev1.ToolCall{CallId: id, Name: bc.Name, Arguments: args, IdempotencyKey: bc.IdempotencyKey}
		if bc.Timeout != nil {
			calls[i].Timeout = durationpb.New(time.Duration(*bc.Timeout))
		}
	}
	return calls, nil
}

// decodeBatchCall decodes one element of a batch file, saying in the file's
// own terms (JSON kinds and field names, not Go types) what is wrong with it.
func decodeBatchCall(elem json.RawMessage) (batchCall, error) {
	var bc batchCall
	if elem[0] != '{' {
		return bc, fmt.Errorf("%.40s is not a call; want %s", elem, batchFileShape)
	}
	dec := json.NewDecoder(bytes.NewReader(elem))
	dec.DisallowUnknownFields()
	err := dec.Decode(&bc)
	if typeErr := (*json.UnmarshalTypeError)(nil); errors.As(err, &typeErr) {
		return bc, fmt.Errorf("%q is a JSON %s; want %s", typeErr.Field, typeErr.Value, batchFileShape)
	}
	return bc, err
}

// argumentsText returns a call's arguments as JSON text: a JSON string is
// the text itself; anything else is taken as it is.
func argumentsText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	return string(raw), nil
}
