package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/toolwire/toolwire/internal/jsonkeys"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// compileSchema compiles a schema and returns it with the property names
// it declares in more than one case (caseNames) and, when checking a value
// against it may multiply with the value's depth, the graph that bounds
// that (costGraph).
func compileSchema(schema json.RawMessage) (*jsonschema.Schema, map[string]bool, *costNode, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("not JSON: %w", err)
	}
	if err := checkNumbers(doc, "schema"); err != nil {
		return nil, nil, nil, err
	}
	if countSubschemas(doc, MaxSubschemas) > MaxSubschemas {
		return nil, nil, nil, fmt.Errorf("more than %s subschemas; a schema here holds at most that many (compiling costs the square of their number)", printer.Sprint(MaxSubschemas))
	}
	if schemaChecks(doc, MaxSchemaChecks) > MaxSchemaChecks {
		return nil, nil, nil, fmt.Errorf("a part of a value could be checked against more than %s of its subschemas in place (through anyOf, allOf, oneOf, $ref, …), each on every call; a schema here allows at most that many", printer.Sprint(MaxSchemaChecks))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const url = "toolwire:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, nil, err
	}
	compiled, err := compile(c, url)
	if err != nil {
		return nil, nil, nil, err
	}
	return compiled, caseNames(doc), costGraph(doc), nil
}

// noLoader refuses every schema a $ref or $schema names outside the
// schema itself. A tool's schema comes from whoever declares the tool (an
// MCP server, an OpenAPI document, a remote toolwire), and the compiler's
// default loader reads file: URLs: a schema could have had the server read
// any local file (a key, a FIFO that blocks the tool's first call for
// good) and, through a "const" there, show its text to the model in an
// argument's error. The drafts' own metaschemas are built in and need no
// loader.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas are self-contained here: %q is outside it (use $defs and a local $ref)", url)
}

// decodeJSON parses JSON text for validation. encoding/json's Unmarshal is
// several times cheaper than the number-preserving decoder of jsonschema, and
// exact when every number is an integer of magnitude below 2^53, as in
// almost all tool arguments; any other number (a fraction, whose multipleOf
// check needs exact decimals, or a larger integer) makes it parse the text
// again, keeping numbers as written.
//
// Numbers kept as written are checked against MaxNumberDigits: the
// returned error is then an *ArgumentError about what (what names the
// text: "arguments", "structured content").
func decodeJSON(text, what string) (any, error) {
	var doc any
	if !fractionOrExponent(text) && json.Unmarshal([]byte(text), &doc) == nil && exactNumbers(doc) {
		return doc, nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return doc, checkNumbers(doc, what)
}

// fractionOrExponent reports whether a number in the JSON text has a
// fraction or an exponent: one that float64 rounds to an integer
// (2.00000000000000001, 1e-400) would read as that integer, and pass a
// check it fails (an integer type, a multipleOf). A number's exponent
// follows a digit; true's and false's "e" does not.
func fractionOrExponent(text string) bool {
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '"':
			for i++; i < len(text) && text[i] != '"'; i++ {
				if text[i] == '\\' {
					i++
				}
			}
		case c == '.':
			return true
		case (c == 'e' || c == 'E') && i > 0 && '0' <= text[i-1] && text[i-1] <= '9':
			return true
		}
	}
	return false
}

// exactNumbers reports whether every number in v is an integer that float64
// holds exactly.
func exactNumbers(v any) bool {
	switch v := v.(type) {
	case float64:
		// Below 2^53, so the text cannot have been a larger integer that
		// rounded to it.
		return v == math.Trunc(v) && math.Abs(v) < 1<<53
	case map[string]any:
		for _, e := range v {
			if !exactNumbers(e) {
				return false
			}
		}
	case []any:
		for _, e := range v {
			if !exactNumbers(e) {
				return false
			}
		}
	}
	return true
}

// ErrNoSchema is returned when validating with a tool that was not prepared
// by a registry.
var ErrNoSchema = errors.New("tool was not added to a registry")

// ArgumentError says why a call's arguments were rejected, in words the model
// can act on.
type ArgumentError struct {
	Reason     string   // what is wrong as a whole
	Violations []string // each schema violation: JSON pointer and reason
}

func (e *ArgumentError) Error() string {
	if len(e.Violations) == 0 {
		return e.Reason
	}
	return e.Reason + ":\n- " + strings.Join(e.Violations, "\n- ")
}

// ValidateArguments parses arguments (JSON text; empty means {}) and checks
// them against the tool's input schema. It returns the arguments (trimmed of
// surrounding space), or an *ArgumentError.
func (t *Tool) ValidateArguments(arguments string) (json.RawMessage, error) {
	if t.input == nil {
		return nil, ErrNoSchema
	}
	arguments = strings.TrimSpace(arguments)
	if arguments == "" {
		arguments = "{}"
	}
	if t.inputFlat != nil && t.inputFlat.valid(arguments) {
		return json.RawMessage(arguments), nil
	}
	if first, second, ok := jsonkeys.Repeated(arguments, t.inputCaseNames); ok {
		return nil, &ArgumentError{Reason: repeatedReason(first, second)}
	}
	doc, err := decodeJSON(arguments, "arguments")
	if ae, ok := err.(*ArgumentError); ok {
		return nil, ae
	}
	if err != nil {
		return nil, &ArgumentError{Reason: fmt.Sprintf("arguments are not valid JSON (%v); send a JSON object", err)}
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, &ArgumentError{Reason: fmt.Sprintf("arguments must be a JSON object, got %s", jsonKind(doc))}
	}
	if t.inputCost != nil {
		if err := checkCost(t.inputCost, doc, "these arguments"); err != nil {
			return nil, err
		}
	}
	if err := validate(t.input, doc, "arguments"); err != nil {
		if ae, ok := err.(*ArgumentError); ok {
			return nil, ae
		}
		return nil, &ArgumentError{Reason: "arguments do not match the tool's input schema", Violations: violations(err)}
	}
	return json.RawMessage(arguments), nil
}

// ValidateOutput checks structured content against the tool's output schema;
// a tool without one accepts any JSON.
func (t *Tool) ValidateOutput(structured json.RawMessage) error {
	output, flat, cost := t.output, t.outputFlat, t.outputCost
	if output == nil && t.outputLazy != nil {
		cs := t.outputLazy.get()
		if cs.err != nil {
			return fmt.Errorf("the tool's output schema does not compile: %w", cs.err)
		}
		output, flat, cost = cs.schema, cs.flat, cs.cost
	}
	// The text is only read, and not kept: no copy is needed.
	if flat != nil && flat.valid(unsafe.String(unsafe.SliceData(structured), len(structured))) {
		return nil
	}
	if output == nil && json.Valid(structured) {
		// JSON, and no schema: no tree is built to say so (10 MB of
		// numbers from an upstream built 420 MB of one).
		return nil
	}
	doc, err := decodeJSON(string(structured), "structured content")
	if ae, ok := err.(*ArgumentError); ok {
		if output == nil {
			return nil // JSON, and no schema to check its numbers
		}
		return ae
	}
	if err != nil {
		return fmt.Errorf("structured content is not JSON: %w", err)
	}
	if output == nil {
		return nil
	}
	if cost != nil {
		if err := checkCost(cost, doc, "the structured content"); err != nil {
			return err
		}
	}
	if err := validate(output, doc, "structured content"); err != nil {
		if ae, ok := err.(*ArgumentError); ok {
			return ae
		}
		return &ArgumentError{Reason: "structured content does not match the tool's output schema", Violations: violations(err)}
	}
	return nil
}

// NoteOutputMismatch returns res delivered as it is, with err (why its
// structured content does not match the tool's output schema) added to
// its details as "output_schema_mismatch": the violations, or the
// error's text. Details that are a JSON object keep their members; other
// details move under "details".
func NoteOutputMismatch(res *Result, err error) *Result {
	var list []string
	if ae, ok := err.(*ArgumentError); ok && len(ae.Violations) > 0 {
		list = ae.Violations
	} else {
		list = []string{err.Error()}
	}
	det := map[string]json.RawMessage{}
	if len(res.Details) > 0 && json.Unmarshal(res.Details, &det) != nil {
		det = map[string]json.RawMessage{"details": res.Details}
	}
	det["output_schema_mismatch"], _ = json.Marshal(list)
	out := *res
	out.Details, _ = json.Marshal(det)
	return &out
}

// MaxViolations bounds the violations an ArgumentError lists; past it the
// last entry says how many more there were ("… and 9980 more"). Arguments
// or an upstream's answer that break the schema in each element of a long
// array would otherwise list every element, in the call's result, its
// details and the server's log line.
const MaxViolations = 20

// violations flattens a validation error into its leaves, each naming the
// offending location as a JSON pointer: the first MaxViolations of them in
// order, and the count of the rest.
func violations(err error) []string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			ptr := "/" + strings.Join(e.InstanceLocation, "/")
			out = append(out, fmt.Sprintf("%s: %s", ptr, explain(e)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.Sort(out)
	out = slices.Compact(out)
	if n := len(out); n > MaxViolations {
		out = append(out[:MaxViolations:MaxViolations], fmt.Sprintf("… and %d more", n-MaxViolations))
	}
	return out
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}
