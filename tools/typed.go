package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// TypedHandler is a tool function with Go types for its arguments and
// output, in the shape of the MCP go-sdk's ToolHandlerFor: it returns a
// Result, an output value, or an error. Typed says how they combine.
type TypedHandler[In, Out any] func(ctx context.Context, call *Call, in In) (*Result, Out, error)

// SchemaExtender is implemented by a Typed tool's In or Out type to add to
// its inferred schema what inference cannot say: bounds, lengths, enums (a
// `jsonschema:"..."` tag holds only a property's description). Typed calls
// it once, on the zero value, when it builds the tool.
type SchemaExtender interface {
	ExtendSchema(s *jsonschema.Schema)
}

// Typed builds a tool from a Go function. The input schema is inferred from
// In (struct fields without omitempty are required; `jsonschema:"..."` tags
// describe them; see SchemaExtender for the rest), and the validated
// arguments are decoded into In. The tool declares an output schema inferred
// from Out, unless Out is the empty interface (any): then it declares none.
//
// What the function returns becomes the call's result:
//   - an error: the call fails with a TOOL_ERROR carrying the error's
//     message; the Result and Out are ignored.
//   - a nil Result: one is made from Out. Out's JSON is the structured
//     content, and the text the model reads is Out's String method when it
//     has one (see fmt.Stringer), or else Out's JSON text. With Out any, a
//     nil Out makes an empty result.
//   - a Result: it is used as returned (Content, Details, IsError and the
//     rest), except that when the tool declares an output and the result is
//     not an error, Out's JSON is its structured content. An error result
//     carries no structured content from Out: the output schema describes
//     success.
//
// Set Annotations, Timeout and the rest on the returned Tool before adding
// it to a registry.
//
// The server checks the structured content against the output schema. Note
// that encoding/json writes a nil map as null, which the inferred schema (an
// object) rejects: return empty maps, or the call fails with a TOOL_ERROR
// saying the output does not match.
func Typed[In, Out any](name, description string, fn TypedHandler[In, Out]) (Tool, error) {
	inJSON, err := schemaFor[In]()
	if err != nil {
		return Tool{}, fmt.Errorf("tool %q: input schema: %w", name, err)
	}
	// As in the go-sdk, an Out of any declares no output.
	declared := reflect.TypeFor[Out]() != reflect.TypeFor[any]()
	var outJSON json.RawMessage
	if declared {
		if outJSON, err = schemaFor[Out](); err != nil {
			return Tool{}, fmt.Errorf("tool %q: output schema: %w", name, err)
		}
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
			res, out, err := fn(ctx, call, args)
			if err != nil {
				return nil, err
			}
			if res != nil {
				if declared && !res.IsError {
					if res.StructuredContent, err = json.Marshal(out); err != nil {
						return nil, fmt.Errorf("encoding output: %w", err)
					}
				}
				return res, nil
			}
			return fromOutput(any(out)) // once: each conversion may allocate
		},
	}, nil
}

// fromOutput makes the result of a call that returned only its output.
func fromOutput(out any) (*Result, error) {
	if out == nil {
		return &Result{}, nil
	}
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
}

type typedResult struct {
	Result
	content [1]Content
}

// schemaFor infers T's schema, extended by T's SchemaExtender if it has one.
func schemaFor[T any]() (_ json.RawMessage, err error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, err
	}
	var zero T
	if e, ok := any(zero).(SchemaExtender); ok {
		// A misspelt property is a nil schema here: say so, not crash.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%T.ExtendSchema panicked: %v", zero, r)
			}
		}()
		e.ExtendSchema(s)
	}
	return json.Marshal(s)
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
