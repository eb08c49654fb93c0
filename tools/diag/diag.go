// Package diag provides the diagnostic toolset that `toolwire serve --diag`
// enables: echo, sleep and fail. Demos, tests, benchmarks and the examples in
// other languages use it to exercise the service without side effects.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package diag

import (
	"context"
	"errors"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/toolwire/toolwire/tools"
)

// ProgressInterval is how often sleep reports progress.
const ProgressInterval = 50 * time.Millisecond

// EchoArgs are echo's arguments.
type EchoArgs struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

// EchoOutput is echo's structured output.
type EchoOutput struct {
	Text string `json:"text"`
}

// String is what the model reads: the text itself.
func (o EchoOutput) String() string { return o.Text }

// SleepArgs are sleep's arguments.
type SleepArgs struct {
	MS int `json:"ms" jsonschema:"how long to sleep, in milliseconds"`
}

// ExtendSchema bounds ms to a day.
func (SleepArgs) ExtendSchema(s *jsonschema.Schema) {
	ms := s.Properties["ms"]
	ms.Minimum, ms.Maximum = jsonschema.Ptr(0.0), jsonschema.Ptr(float64(24*time.Hour/time.Millisecond))
}

// SleepOutput is sleep's structured output.
type SleepOutput struct {
	SleptMS int64 `json:"slept_ms"`
}

// FailArgs are fail's arguments.
type FailArgs struct {
	Message string `json:"message" jsonschema:"the error message to return"`
}

// Tools returns the diagnostic tools.
func Tools() []tools.Tool {
	echo := tools.MustTyped("echo", "Returns the given text unchanged.",
		func(_ context.Context, _ *tools.Call, in EchoArgs) (*tools.Result, EchoOutput, error) {
			return nil, EchoOutput(in), nil
		})
	echo.Title = "Echo"
	echo.Annotations = tools.Annotations{ReadOnly: true, Idempotent: true}

	sleep := tools.MustTyped("sleep", "Waits for the given number of milliseconds, reporting progress, then returns.",
		func(ctx context.Context, call *tools.Call, in SleepArgs) (*tools.Result, SleepOutput, error) {
			start := time.Now()
			total := time.Duration(in.MS) * time.Millisecond
			timer := time.NewTimer(total)
			defer timer.Stop()
			tick := time.NewTicker(ProgressInterval)
			defer tick.Stop()
			call.Progressf(0, float64(in.MS), "sleeping %d ms", in.MS)
			for {
				select {
				case <-ctx.Done():
					return nil, SleepOutput{}, ctx.Err()
				case <-timer.C:
					return nil, SleepOutput{SleptMS: time.Since(start).Milliseconds()}, nil
				case <-tick.C:
					done := min(time.Since(start), total)
					call.Progressf(float64(done.Milliseconds()), float64(in.MS), "slept %d of %d ms", done.Milliseconds(), in.MS)
				}
			}
		})
	sleep.Title = "Sleep"
	sleep.Annotations = tools.Annotations{ReadOnly: true, Idempotent: true}

	fail := tools.MustTyped("fail", "Fails with the given message; for testing error handling.",
		func(_ context.Context, _ *tools.Call, in FailArgs) (*tools.Result, any, error) {
			return nil, nil, errors.New(in.Message)
		})
	fail.Title = "Fail"

	return []tools.Tool{echo, sleep, fail}
}
