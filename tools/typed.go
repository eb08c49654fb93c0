package tools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// TypedHandler is a tool function with Go types for its arguments and output.
type TypedHandler[In, Out any] func(ctx context.Context, call *Call, in In) (Out, error)

// Typed builds a tool from a Go function. The input and output schemas are
// inferred from In and Out (struct fields without omitempty are required;
// `jsonschema:"..."` tags describe them). The validated arguments are decoded
// into In; the returned Out becomes the result's structured content, and the
// content the model reads is Out's String method when it has one (see
// fmt.Stringer), or else Out's JSON text. Set Annotations, Timeout and the
// rest on the returned Tool before adding it to a registry.
//
// The server checks the structured content against the output schema. Note
// that encoding/json writes a nil map as null, which the inferred schema (an
// object) rejects: return empty maps, or the call fails with a TOOL_ERROR
// saying the output does not match.
func Typed[In, Out any](name, description string, fn TypedHandler[In, Out]) (Tool, error) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %q: input schema: %w", name, err)
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %q: output schema: %w", name, err)
	}
	inJSON, err := json.Marshal(in)
	if err != nil {
		return Tool{}, err
	}
	outJSON, err := json.Marshal(out)
	if err != nil {
		return Tool{}, err
	}
	return Tool{
		Name:         name,
		Description:  description,
		InputSchema:  inJSON,
		OutputSchema: outJSON,
		Handler: func(ctx context.Context, call *Call) (*Result, error) {
			var args In
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, fmt.Errorf("decoding arguments: %w", err)
			}
			res, err := fn(ctx, call, args)
			if err != nil {
				return nil, err
			}
			out := any(res) // once: each conversion may allocate
			structured, err := json.Marshal(out)
			if err != nil {
				return nil, fmt.Errorf("encoding output: %w", err)
			}
			// The result and its one content block in one allocation.
			r := &typedResult{Result: Result{StructuredContent: structured}}
			if s, ok := out.(fmt.Stringer); ok {
				r.content[0].Text = s.String()
			} else {
				r.content[0].Text = string(structured)
			}
			r.Content = r.content[:]
			return &r.Result, nil
		},
	}, nil
}

type typedResult struct {
	Result
	content [1]Content
}

// MustTyped is Typed for tools whose types are fixed at compile time; it
// panics when a schema cannot be inferred.
func MustTyped[In, Out any](name, description string, fn TypedHandler[In, Out]) Tool {
	t, err := Typed(name, description, fn)
	if err != nil {
		panic(err)
	}
	return t
}
