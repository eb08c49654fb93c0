package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type greetIn struct {
	Name  string `json:"name" jsonschema:"who to greet"`
	Times int    `json:"times,omitempty"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

func TestTypedInfersSchemasAndReturnsStructuredContent(t *testing.T) {
	t.Parallel()
	tool, err := Typed("greet", "Greets.", func(_ context.Context, _ *Call, in greetIn) (greetOut, error) {
		if in.Name == "error" {
			return greetOut{}, errors.New("cannot greet error")
		}
		return greetOut{Greeting: strings.Repeat("hello "+in.Name, max(in.Times, 1))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := r.Snapshot().Lookup("greet")

	var in map[string]any
	if err := json.Unmarshal(reg.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if in["type"] != "object" || !strings.Contains(string(reg.InputSchema), `"required":["name"]`) || !strings.Contains(string(reg.InputSchema), "who to greet") {
		t.Errorf("input schema %s: want an object requiring name, with its description", reg.InputSchema)
	}
	if _, err := reg.ValidateArguments(`{"times":2}`); err == nil {
		t.Error("missing required name accepted")
	}

	args, err := reg.ValidateArguments(`{"name":"ada"}`)
	if err != nil {
		t.Fatal(err)
	}
	res, err := reg.Handler(context.Background(), NewCall("1", "greet", args, nil))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.StructuredContent) != `{"greeting":"hello ada"}` || res.Content[0].Text != `{"greeting":"hello ada"}` {
		t.Errorf("result %+v", res)
	}
	if err := reg.ValidateOutput(res.StructuredContent); err != nil {
		t.Errorf("output does not match the inferred output schema: %v", err)
	}
	if _, err := reg.Handler(context.Background(), NewCall("2", "greet", json.RawMessage(`{"name":"error"}`), nil)); err == nil || err.Error() != "cannot greet error" {
		t.Errorf("handler error = %v, want the function's error", err)
	}
}

type shout struct {
	Loud string `json:"loud"`
}

func (s shout) String() string { return s.Loud + "!" }

func TestTypedTextFromStringer(t *testing.T) {
	t.Parallel()
	tool := MustTyped("shout", "", func(_ context.Context, _ *Call, in greetIn) (shout, error) { return shout{Loud: in.Name}, nil })
	res, err := tool.Handler(context.Background(), NewCall("1", "shout", json.RawMessage(`{"name":"hey"}`), nil))
	if err != nil || res.Content[0].Text != "hey!" || string(res.StructuredContent) != `{"loud":"hey"}` {
		t.Errorf("result %+v, %v; want the String text and the JSON structured content", res, err)
	}
}

func TestTypedRejectsTypesWithoutSchema(t *testing.T) {
	t.Parallel()
	_, err := Typed("bad", "", func(context.Context, *Call, struct{ C chan int }) (struct{}, error) { return struct{}{}, nil })
	if err == nil {
		t.Error("a channel field was accepted")
	}
}

func TestCallReportsStopAfterClose(t *testing.T) {
	t.Parallel()
	var got []Progress
	c := NewCall("1", "x", nil, func(p Progress) { got = append(got, p) })
	c.Progressf(1, 2, "half %s", "way")
	c.Output("chunk")
	c.Close()
	c.Output("late")
	if len(got) != 2 || *got[0].Progress != 1 || *got[0].Total != 2 || got[0].Message != "half way" || got[1].Output != "chunk" {
		t.Errorf("reports = %+v, want the two made before Close", got)
	}
	var nilCall *Call
	nilCall.Output("no panic") // a nil handle is a no-op
}

type mapOut struct {
	Counts map[string]int `json:"counts"`
}

// The inferred schema and encoding/json disagree on nil maps (null is not an
// object), so output is checked even when it comes from the Go type.
func TestTypedOutputIsCheckedAgainstTheInferredSchema(t *testing.T) {
	t.Parallel()
	tool := MustTyped("t", "", func(context.Context, *Call, struct{}) (mapOut, error) { return mapOut{}, nil })
	r, err := NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := r.Snapshot().Lookup("t")
	res, err := reg.Handler(context.Background(), NewCall("1", "t", json.RawMessage(`{}`), nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.ValidateOutput(res.StructuredContent); err == nil || !strings.Contains(err.Error(), "/counts") {
		t.Errorf("ValidateOutput(%s) = %v, want a violation at /counts", res.StructuredContent, err)
	}
	if err := reg.ValidateOutput(json.RawMessage(`{"counts":{}}`)); err != nil {
		t.Errorf("an empty map was rejected: %v", err)
	}
}
