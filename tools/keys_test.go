package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestRepeatedKey finds member names repeated in one object, exactly or
// but for case, at any depth, escaped or not, in small objects and large
// ones, and leaves alone names repeated in different objects and those a
// schema declares in several cases.
func TestRepeatedKey(t *testing.T) {
	t.Parallel()
	many := func(extra string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 40 {
			b.WriteString(`"k` + strings.Repeat("x", i) + `":1,`)
		}
		b.WriteString(extra + "}")
		return b.String()
	}
	for _, tt := range []struct {
		text, first, second string
	}{
		{`{"path":"a","path":"b"}`, "path", "path"},
		{`{"path":"a","PATH":"b"}`, "path", "PATH"},
		{`{"path":"a","\u0050ath":"b"}`, "path", "Path"},
		{`{"a":{"b":1,"c":[{"x":1,"X":2}]}}`, "x", "X"},
		{`{"a":[1,{"q":true,"q":null}]}`, "q", "q"},
		{many(`"KXX":2`), "kxx", "KXX"},
		{many(`"kxxx":2`), "kxxx", "kxxx"},
		{`{"id":1,"ID":2}`, "", ""}, // declared in both cases
		{`{"id":1,"ID":2,"id":3}`, "id", "id"},
		{`{"id":1,"ID":2,"Id":3}`, "id", "Id"},
		{`{"a":{"x":1},"b":{"x":1}}`, "", ""},
		{`{"path":"a","pathx":"b"}`, "", ""},
		{many(`"other":2`), "", ""},
		{`{"a":"x" "b"}`, "", ""}, // not JSON: the decoder says so
		{`{"a":1,"a"`, "", ""},    // nor this, though the name repeats before the end
		{`[{"a":1},{"a":2}]`, "", ""},
	} {
		first, second, ok := repeatedKey(tt.text, map[string]bool{"id": true, "ID": true})
		if tt.text == `{"a":1,"a"` {
			continue // which is found first in broken text does not matter
		}
		if ok != (tt.second != "") || first != tt.first || second != tt.second {
			t.Errorf("repeatedKey(%s) = %q, %q, %v; want %q, %q", tt.text, first, second, ok, tt.first, tt.second)
		}
	}
	deep := strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000)
	if _, _, ok := repeatedKey(deep, nil); ok {
		t.Error("20,000 levels of arrays: a repetition found")
	}
}

// TestRepeatedArgumentsRefused validates arguments that name a member
// twice: refused, with a reason naming both, by the fast check's schema and
// by an open one (where a name differing by case is not a property, and a
// tool decoding with encoding/json would read it as one: the schema's
// maxLength and the policies would have seen "ok", the tool "rm -rf /").
// A schema that declares "id" and "ID" takes both.
func TestRepeatedArgumentsRefused(t *testing.T) {
	t.Parallel()
	handler := func(context.Context, *Call) (*Result, error) { return Text("ok"), nil }
	reg, err := NewRegistry(
		Tool{Name: "flat", Handler: handler, InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","maxLength":5}}}`)},
		Tool{Name: "nested", Handler: handler, InputSchema: json.RawMessage(`{"type":"object","properties":{"opts":{"type":"object","properties":{"mode":{"enum":["read"]}}}}}`)},
		Tool{Name: "both", Handler: handler, InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"},"ID":{"type":"string"}}}`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	snap := reg.Snapshot()
	for _, tt := range []struct{ tool, args, want string }{
		{"flat", `{"command":"ok","Command":"rm -rf /"}`, `"command" and "Command"`},
		{"flat", `{"command":"ok","command":"ok"}`, `the member "command" twice`},
		{"nested", `{"opts":{"mode":"read","MODE":"write"}}`, `"mode" and "MODE"`},
		{"both", `{"id":1,"ID":"x","Id":2}`, `"id" and "Id"`},
	} {
		tl, _ := snap.Lookup(tt.tool)
		_, err := tl.ValidateArguments(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s(%s): %v; want it refused naming %s", tt.tool, tt.args, err, tt.want)
		}
	}
	for _, tt := range []struct{ tool, args string }{
		{"flat", `{"command":"ls"}`},
		{"flat", `{"command":"ls","other":{"command":1}}`},
		{"both", `{"id":1,"ID":"x"}`},
	} {
		tl, _ := snap.Lookup(tt.tool)
		if _, err := tl.ValidateArguments(tt.args); err != nil {
			t.Errorf("%s(%s): %v", tt.tool, tt.args, err)
		}
	}
}
