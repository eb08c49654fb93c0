package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
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
	tool, err := Typed("greet", "Greets.", func(_ context.Context, _ *Call, in greetIn) (*Result, greetOut, error) {
		if in.Name == "error" {
			return nil, greetOut{}, errors.New("cannot greet error")
		}
		return nil, greetOut{Greeting: strings.Repeat("hello "+in.Name, max(in.Times, 1))}, nil
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
	tool := MustTyped("shout", "", func(_ context.Context, _ *Call, in greetIn) (*Result, shout, error) {
		return nil, shout{Loud: in.Name}, nil
	})
	res, err := tool.Handler(context.Background(), NewCall("1", "shout", json.RawMessage(`{"name":"hey"}`), nil))
	if err != nil || res.Content[0].Text != "hey!" || string(res.StructuredContent) != `{"loud":"hey"}` {
		t.Errorf("result %+v, %v; want the String text and the JSON structured content", res, err)
	}
}

func TestTypedRejectsTypesWithoutSchema(t *testing.T) {
	t.Parallel()
	_, err := Typed("bad", "", func(context.Context, *Call, struct{ C chan int }) (*Result, struct{}, error) {
		return nil, struct{}{}, nil
	})
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
	tool := MustTyped("t", "", func(context.Context, *Call, struct{}) (*Result, mapOut, error) { return nil, mapOut{}, nil })
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

// A Result the function returns keeps its content and details, and Out
// still fills the structured content the output schema declares.
func TestTypedResultKeepsContentAndDetails(t *testing.T) {
	t.Parallel()
	tool := MustTyped("greet", "", func(_ context.Context, _ *Call, in greetIn) (*Result, greetOut, error) {
		if in.Name == "nobody" {
			return Errorf("there is nobody to greet"), greetOut{}, nil
		}
		return &Result{Content: []Content{{Text: "hi " + in.Name}, {Data: []byte{1}, MIMEType: "image/png"}},
			Details: json.RawMessage(`{"ui":"wave"}`)}, greetOut{Greeting: "hi " + in.Name}, nil
	})
	if tool.OutputSchema == nil {
		t.Fatal("no output schema declared for a struct Out")
	}
	res, err := tool.Handler(context.Background(), NewCall("1", "greet", json.RawMessage(`{"name":"ada"}`), nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 2 || res.Content[0].Text != "hi ada" || res.Content[1].MIMEType != "image/png" {
		t.Errorf("content = %+v, want the function's two blocks", res.Content)
	}
	if string(res.Details) != `{"ui":"wave"}` || string(res.StructuredContent) != `{"greeting":"hi ada"}` || res.IsError {
		t.Errorf("result = %+v; want the function's details and Out as structured content", res)
	}

	res, err = tool.Handler(context.Background(), NewCall("2", "greet", json.RawMessage(`{"name":"nobody"}`), nil))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Content[0].Text != "there is nobody to greet" || res.StructuredContent != nil {
		t.Errorf("error result = %+v; want the function's error text and no structured content", res)
	}
}

// With Out any the tool declares no output, and its Result is used as is.
func TestTypedWithoutOutput(t *testing.T) {
	t.Parallel()
	tool := MustTyped("note", "", func(_ context.Context, _ *Call, in greetIn) (*Result, any, error) {
		switch in.Name {
		case "":
			return nil, nil, nil
		case "fail":
			return Text("ignored"), nil, errors.New("failed")
		}
		return &Result{Content: []Content{{Text: in.Name}}, StructuredContent: json.RawMessage(`[1]`), Details: json.RawMessage(`{"d":1}`)}, nil, nil
	})
	if tool.OutputSchema != nil {
		t.Errorf("output schema = %s, want none for Out any", tool.OutputSchema)
	}
	res, err := tool.Handler(context.Background(), NewCall("1", "note", json.RawMessage(`{"name":"x"}`), nil))
	if err != nil || len(res.Content) != 1 || res.Content[0].Text != "x" || string(res.StructuredContent) != `[1]` || string(res.Details) != `{"d":1}` {
		t.Errorf("result = %+v, %v; want the function's result unchanged", res, err)
	}
	res, err = tool.Handler(context.Background(), NewCall("2", "note", json.RawMessage(`{"name":""}`), nil))
	if err != nil || res == nil || len(res.Content) != 0 || res.StructuredContent != nil || res.IsError {
		t.Errorf("nil result and nil output = %+v, %v; want an empty result", res, err)
	}
	if res, err := tool.Handler(context.Background(), NewCall("3", "note", json.RawMessage(`{"name":"fail"}`), nil)); err == nil || err.Error() != "failed" || res != nil {
		t.Errorf("error = %+v, %v; want the function's error and no result", res, err)
	}
}

type boundedIn struct {
	Path  string `json:"path" jsonschema:"where"`
	Depth int    `json:"depth,omitempty"`
}

func (boundedIn) ExtendSchema(s *jsonschema.Schema) {
	s.Properties["path"].MinLength = jsonschema.Ptr(1)
	s.Properties["depth"].Minimum, s.Properties["depth"].Maximum = jsonschema.Ptr(1.0), jsonschema.Ptr(10.0)
}

type misspeltIn struct {
	Path string `json:"path"`
}

func (misspeltIn) ExtendSchema(s *jsonschema.Schema) {
	s.Properties["paht"].MinLength = jsonschema.Ptr(1)
}

func TestTypedSchemaExtender(t *testing.T) {
	t.Parallel()
	tool := MustTyped("b", "", func(context.Context, *Call, boundedIn) (*Result, any, error) { return Text("ok"), nil, nil })
	r, err := NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := r.Snapshot().Lookup("b")
	for _, bad := range []string{`{"path":""}`, `{"path":"a","depth":0}`, `{"path":"a","depth":11}`} {
		if _, err := reg.ValidateArguments(bad); err == nil {
			t.Errorf("%s accepted; the extended schema bounds it", bad)
		}
	}
	if _, err := reg.ValidateArguments(`{"path":"a","depth":10}`); err != nil {
		t.Errorf("valid arguments refused: %v", err)
	}
	if !strings.Contains(string(tool.InputSchema), `"description":"where"`) {
		t.Errorf("input schema %s lost the tag's description", tool.InputSchema)
	}

	_, err = Typed("m", "", func(context.Context, *Call, misspeltIn) (*Result, any, error) { return nil, nil, nil })
	if err == nil || !strings.Contains(err.Error(), "ExtendSchema") {
		t.Errorf("a misspelt property in ExtendSchema = %v, want an error naming it", err)
	}
}
