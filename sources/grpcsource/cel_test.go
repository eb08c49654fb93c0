package grpcsource

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	confpb "google.golang.org/genproto/googleapis/api/expr/conformance/v1alpha1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// callTool runs one call through a toolwire server over gRPC, as a
// runtime would: the engine validates the arguments, runs the tool and
// checks its structured content.
func callTool(t *testing.T, srv *loopback.Server, name, args string) *toolwirev1.CallResult {
	t.Helper()
	res, err := srv.Client.CallTool(t.Context(), &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "c", Name: name, Arguments: args}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func resultText(res *toolwirev1.CallResult) string {
	var b strings.Builder
	for _, c := range res.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// messageTypes counts the message types md's fields reach, md's own
// included and the well-known types (which have JSON forms of their own)
// left out.
func messageTypes(md protoreflect.MessageDescriptor) int {
	seen := map[protoreflect.FullName]bool{}
	var walk func(m protoreflect.MessageDescriptor)
	walk = func(m protoreflect.MessageDescriptor) {
		if seen[m.FullName()] || isWellKnown(m.FullName()) {
			return
		}
		seen[m.FullName()] = true
		for i := range m.Fields().Len() {
			f := m.Fields().Get(i)
			if f.IsMap() {
				f = f.MapValue()
			}
			if f.Message() != nil {
				walk(f.Message())
			}
		}
	}
	walk(md)
	return len(seen)
}

// messageSchemas counts the schemas of messages in schema: the objects
// with their properties and no others.
func messageSchemas(t *testing.T, schema json.RawMessage) int {
	var doc any
	if err := json.Unmarshal(schema, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["properties"]; ok && v["additionalProperties"] == false {
				n++
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return n
}

// TestCELConformance offers Google's CEL conformance service, whose
// expressions are messages nested without end, from a real server
// through reflection, and serves its tools from toolwire over gRPC: each
// message type is defined once (the input schema of Eval was 407 KB, of
// Check 313 KB, when unrolled), a real expression's tree validates at any
// depth and is evaluated, and a wrong value deep in it, or two fields of
// one oneof, are INVALID_ARGUMENTS naming them.
func TestCELConformance(t *testing.T) {
	t.Parallel()
	addr, _ := startServices(t)
	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "cel", Target: addr, Insecure: true, Include: []string{"google.api.expr.**"}}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the CEL tools", sourcetest.Has("cel_ConformanceService_Eval"))
	if diff := cmp.Diff([]string{"cel_ConformanceService_Check", "cel_ConformanceService_Eval", "cel_ConformanceService_Parse"}, snap.Names()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	svc := confpb.File_google_api_expr_conformance_v1alpha1_conformance_service_proto.Services().Get(0)
	for _, m := range []string{"Parse", "Check", "Eval"} {
		tl, _ := snap.Lookup("cel_ConformanceService_" + m)
		md := svc.Methods().ByName(protoreflect.Name(m))
		for _, sc := range []struct {
			what   string
			schema json.RawMessage
			md     protoreflect.MessageDescriptor
		}{{"input", tl.InputSchema, md.Input()}, {"output", tl.OutputSchema, md.Output()}} {
			t.Logf("%s: %s schema %d bytes", m, sc.what, len(sc.schema))
			if len(sc.schema) > 32<<10 {
				t.Errorf("%s's %s schema is %d bytes", m, sc.what, len(sc.schema))
			}
			if got, want := messageSchemas(t, sc.schema), messageTypes(sc.md); got != want {
				t.Errorf("%s's %s schema describes %d objects for %d message types", m, sc.what, got, want)
			}
		}
	}

	// Type.PrimitiveType, of Type's primitive and wrapper fields: one
	// definition too.
	if check, _ := snap.Lookup("cel_ConformanceService_Check"); strings.Count(string(check.InputSchema), `"INT64"`) != 1 {
		t.Errorf("PrimitiveType's values are not defined once in Check's input schema")
	}

	srv := loopback.Serve(t, reg, grpcserve.Config{})
	parse := func(src string) json.RawMessage {
		res := callTool(t, srv, "cel_ConformanceService_Parse", fmt.Sprintf(`{"celSource":%q}`, src))
		var out struct{ ParsedExpr json.RawMessage }
		if res.GetIsError() || json.Unmarshal([]byte(res.GetStructuredContent()), &out) != nil || out.ParsedExpr == nil {
			t.Fatalf("Parse(%s): %s", src, resultText(res))
		}
		return out.ParsedExpr
	}
	eval := func(args string) string {
		res := callTool(t, srv, "cel_ConformanceService_Eval", args)
		var out struct {
			Result struct {
				Value map[string]any
			}
		}
		if res.GetIsError() || json.Unmarshal([]byte(res.GetStructuredContent()), &out) != nil {
			t.Fatalf("Eval(%.200s): %s", args, resultText(res))
		}
		v, _ := json.Marshal(out.Result.Value)
		return string(v)
	}
	parsed := parse("1 + x * 2")
	bindings := `"bindings":{"x":{"value":{"int64Value":"20"}}}`
	if got := eval(`{"parsedExpr":` + string(parsed) + `,` + bindings + `}`); got != `{"int64Value":"41"}` {
		t.Errorf("Eval of the parsed expression: %s", got)
	}
	res := callTool(t, srv, "cel_ConformanceService_Check", `{"parsedExpr":`+string(parsed)+`,"typeEnv":[{"name":"x","ident":{"type":{"primitive":"INT64"}}}]}`)
	var checked struct{ CheckedExpr json.RawMessage }
	if res.GetIsError() || json.Unmarshal([]byte(res.GetStructuredContent()), &checked) != nil || checked.CheckedExpr == nil {
		t.Fatalf("Check: %s", resultText(res))
	}
	if got := eval(`{"checkedExpr":` + string(checked.CheckedExpr) + `,` + bindings + `}`); got != `{"int64Value":"41"}` {
		t.Errorf("Eval of the checked expression: %s", got)
	}
	// 60 additions nest 60 calls deep, past where the unrolled schema
	// accepted anything.
	deep := parse(strings.TrimSuffix(strings.Repeat("1 + ", 60), " + "))
	if got := eval(`{"parsedExpr":` + string(deep) + `}`); got != `{"int64Value":"60"}` {
		t.Errorf("Eval 60 deep: %s", got)
	}

	// The innermost constant of the deep tree, made wrong in each way.
	leaf := `{"int64Value":"1"}`
	at := strings.LastIndex(string(deep), leaf)
	if at < 0 {
		t.Fatalf("no constant 1 in %s", deep)
	}
	pointer := func(bad string) string {
		var doc any
		if err := json.Unmarshal([]byte(string(deep[:at])+bad+string(deep[at+len(leaf):])), &doc); err != nil {
			t.Fatal(err)
		}
		return findPointer(doc, "")
	}
	for _, bad := range []string{
		`{"timestampValue":"2026-02-30T00:00:00Z"}`,
		`{"durationValue":"5 minutes"}`,
		`{"int64Value":"9223372036854775808"}`,
		`{"uint64Value":"-1"}`,
		`{"bytesValue":"not base64!"}`,
		`{"int64Value":"1","stringValue":"one"}`,
	} {
		args := `{"parsedExpr":` + string(deep[:at]) + bad + string(deep[at+len(leaf):]) + `}`
		res := callTool(t, srv, "cel_ConformanceService_Eval", args)
		want := "/parsedExpr" + pointer(bad)
		if res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS || !strings.Contains(resultText(res), want) {
			t.Errorf("%s deep in the tree: %v %s; want INVALID_ARGUMENTS naming %s", bad, res.GetErrorKind(), resultText(res), want)
		}
	}
	res = callTool(t, srv, "cel_ConformanceService_Eval", `{"parsedExpr":`+string(parsed)+`,"checkedExpr":`+string(checked.CheckedExpr)+`}`)
	if res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS || !strings.Contains(resultText(res), `/checkedExpr: "checkedExpr" cannot be set together with "parsedExpr"`) {
		t.Errorf("both parsedExpr and checkedExpr: %v %s", res.GetErrorKind(), resultText(res))
	}
}

// findPointer is the JSON pointer (from "") of the deepest object holding
// a constant's kind, with the field's name.
func findPointer(doc any, at string) string {
	switch v := doc.(type) {
	case map[string]any:
		for _, k := range []string{"timestampValue", "durationValue", "uint64Value", "bytesValue", "stringValue"} {
			if _, ok := v[k]; ok {
				return at + "/" + k
			}
		}
		if _, ok := v["int64Value"]; ok && v["int64Value"] != "1" {
			return at + "/int64Value"
		}
		for k, e := range v {
			if p := findPointer(e, at+"/"+k); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range v {
			if p := findPointer(e, fmt.Sprintf("%s/%d", at, i)); p != "" {
				return p
			}
		}
	}
	return ""
}
