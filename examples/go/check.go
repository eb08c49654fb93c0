package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc/codes"
)

// failFunc records one mismatch.
type failFunc func(format string, args ...any)

// checkDeclarations compares ListTools' declarations, and the OpenAI tools
// made from them, with the expected tools.
func checkDeclarations(fail failFunc, want *ListToolsExpect, got []*toolwirev1.Tool, decls []client.OpenAITool) {
	for _, w := range want.ToolsInclude {
		i := slices.IndexFunc(got, func(t *toolwirev1.Tool) bool { return t.GetName() == w.Name })
		if i < 0 {
			fail("tool %q is not declared", w.Name)
			continue
		}
		if ro := got[i].GetAnnotations().GetReadOnly(); ro != w.ReadOnly {
			fail("tool %q: read_only %v, want %v", w.Name, ro, w.ReadOnly)
		}
		d := decls[i]
		var params struct {
			Type     string   `json:"type"`
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(d.Function.Parameters, &params); err != nil {
			fail("tool %q: OpenAI parameters are not a JSON object: %v", w.Name, err)
			continue
		}
		if d.Type != "function" || d.Function.Name != w.Name || params.Type != "object" {
			fail("tool %q: OpenAI declaration type %q, name %q, parameters of type %q; want function, %q, object",
				w.Name, d.Type, d.Function.Name, params.Type, w.Name)
		}
		for _, r := range w.Required {
			if !slices.Contains(params.Required, r) {
				fail("tool %q: parameter %q is not required (required: %q)", w.Name, r, params.Required)
			}
		}
	}
}

// checkBatch compares what a batch's stream showed with the expectations.
func checkBatch(fail failFunc, want *BatchExpectations, rec *batchRecord) {
	wantStatus := cmp.Or(want.RPCStatus, "OK")
	if got := codeName(rec.status.Code()); got != wantStatus {
		fail("the RPC ended with %s (%q), want %s", got, rec.status.Message(), wantStatus)
	}
	if !strings.Contains(rec.status.Message(), want.RPCMessageContains) {
		fail("the RPC's message %q does not contain %q", rec.status.Message(), want.RPCMessageContains)
	}
	matches(fail, "events", want.Events, rec.letters)

	if want.Lanes != nil {
		var got []LaneExpect
		for i, l := range rec.accepted.GetLanes() {
			if int(l.GetIndex()) != i {
				fail("lane %d has index %d", i, l.GetIndex())
			}
			got = append(got, LaneExpect{CallIDs: l.GetCallIds(), Parallel: l.GetParallel()})
		}
		if !reflect.DeepEqual(got, want.Lanes) {
			fail("lanes %s, want %s", jsonText(got), jsonText(want.Lanes))
		}
	}
	if want.Finished != nil {
		f := rec.finished
		if f == nil {
			f = &toolwirev1.BatchFinished{}
			fail("no finished event")
		}
		got := map[string]uint32{
			"succeeded": f.GetSucceeded(), "failed": f.GetFailed(), "skipped": f.GetSkipped(),
			"cancelled": f.GetCancelled(), "replayed": f.GetReplayed(),
		}
		for k, w := range want.Finished {
			if g, ok := got[k]; !ok {
				fail("finished has no count %q", k)
			} else if g != w {
				fail("finished %s = %d, want %d (got %s)", k, g, w, jsonText(got))
			}
		}
	}
	for _, id := range sortedKeys(want.Calls) {
		cr, ok := rec.perCall[id]
		if !ok {
			fail("call %q is not in the batch", id)
			continue
		}
		checkCall(func(format string, args ...any) { fail("call "+id+": "+format, args...) }, want.Calls[id], cr)
	}
}

// checkCall compares one call's events with its expectations.
func checkCall(fail failFunc, want *CallExpects, cr *callRecord) {
	matches(fail, "events", want.Events, cr.letters)
	if p := want.Progress; p != nil && len(cr.progress) > 0 {
		for _, ev := range cr.progress {
			if p.Total != nil && (ev.Total == nil || ev.GetTotal() != *p.Total) {
				fail("progress total %v, want %g", ev.Total, *p.Total)
				break
			}
		}
		if p.FirstMessage != nil && cr.progress[0].GetMessage() != *p.FirstMessage {
			fail("first progress message %q, want %q", cr.progress[0].GetMessage(), *p.FirstMessage)
		}
		if last := cr.progress[len(cr.progress)-1].GetMessage(); !strings.Contains(last, p.LastMessageContains) {
			fail("last progress message %q does not contain %q", last, p.LastMessageContains)
		}
	}
	w := want.Result
	if w == nil {
		return
	}
	r := cr.result
	if r == nil {
		fail("no result")
		return
	}
	if w.IsError != nil && r.GetIsError() != *w.IsError {
		fail("is_error %v, want %v", r.GetIsError(), *w.IsError)
	}
	if w.ErrorKind != "" && r.GetErrorKind().String() != w.ErrorKind {
		fail("error_kind %s, want %s", r.GetErrorKind(), w.ErrorKind)
	}
	if w.ToolName != "" && r.GetToolName() != w.ToolName {
		fail("tool_name %q, want %q", r.GetToolName(), w.ToolName)
	}
	// Texts are checked as the model will read them: in the tool message.
	msg := client.OpenAIToolMessage(r)
	if msg.Role != "tool" || msg.ToolCallID != r.GetCallId() {
		fail("tool message role %q, tool_call_id %q", msg.Role, msg.ToolCallID)
	}
	if w.Text != nil && msg.Content != *w.Text {
		fail("text %q, want %q", msg.Content, *w.Text)
	}
	for _, sub := range w.TextContains {
		if !strings.Contains(msg.Content, sub) {
			fail("text %q does not contain %q", msg.Content, sub)
		}
	}
	if w.Structured != nil || w.StructuredMin != nil {
		var got any
		if err := json.Unmarshal([]byte(r.GetStructuredContent()), &got); err != nil {
			fail("structured_content %q is not JSON: %v", r.GetStructuredContent(), err)
			return
		}
		if w.Structured != nil {
			var want any
			if err := json.Unmarshal(w.Structured, &want); err != nil || !reflect.DeepEqual(got, want) {
				fail("structured_content %s, want %s", r.GetStructuredContent(), w.Structured)
			}
		}
		obj, _ := got.(map[string]any)
		for _, k := range sortedKeys(w.StructuredMin) {
			if n, ok := obj[k].(float64); !ok || n < w.StructuredMin[k] {
				fail("structured_content %s: %q is not a number of at least %g", r.GetStructuredContent(), k, w.StructuredMin[k])
			}
		}
	}
}

// matches checks letters against pattern; an empty pattern checks nothing.
func matches(fail failFunc, what, pattern string, letters []byte) {
	if pattern == "" {
		return
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		fail("%s pattern %q: %v", what, pattern, err)
		return
	}
	if !re.Match(letters) {
		fail("%s %q do not match %q", what, letters, pattern)
	}
}

// codeNames are the canonical names of gRPC's status codes, as the
// scenario spells them, indexed by code.
var codeNames = []string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return c.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}
