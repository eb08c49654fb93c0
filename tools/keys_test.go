package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

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
