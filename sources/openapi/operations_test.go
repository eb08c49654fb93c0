package openapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/tools"
)

// TestPerOperation loads a document most of whose operations are wrong in
// one way each: every one that can be a correct tool is one, each that
// cannot is skipped with one log line naming it and why, the excluded
// broken one is neither checked nor logged, and one line sums it all up.
// What public documents trip on loads: conflicting paths, siblings beside a
// $ref, invalid examples (in an operation and in a webhook), a response
// $ref to nowhere, raw C1 characters and surrogate-pair escapes in JSON.
func TestPerOperation(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	src, reg, logs := newSource(t)
	cfg := Config{Name: "ops", Spec: "testdata/operations.json", BaseURL: srv.URL + "/base", Exclude: []string{"excludedBroken"}}
	if err := src.Check(t.Context(), []Config{cfg}); err != nil {
		t.Fatal(err)
	}
	if err := src.Sync(t.Context(), []Config{cfg}); err != nil {
		t.Fatal(err)
	}
	want := []string{"ops_badExample", "ops_createRef", "ops_deleteAttestation", "ops_listAttestations", "ops_updateIssue"}
	if diff := cmp.Diff(want, reg.Snapshot().Names()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	skips := map[string]string{
		"GET /missing":         `"reason":"$ref \"#/components/schemas/Nope\": the document has nothing there"`,
		"POST /external":       `"reason":"$ref \"other.json#/components/schemas/Thing\": a reference to another document`,
		"GET /cookie":          `"reason":"parameter \"session\" is sent in a cookie, which toolwire does not send"`,
		"POST /upload":         `"reason":"the request body is multipart/form-data, which toolwire does not send`,
		"GET /undeclared/{id}": `"reason":"path parameter {id} is not declared"`,
		"GET /matrix":          `"reason":"parameter \"m\": style \"matrix\" is not one a query parameter can have`,
		"GET /nested":          `"reason":"parameter \"filter\": its values nest objects or arrays, which style form cannot carry (only deepObject can)"`,
		"* /broken-item":       `"reason":"path item: $ref \"#/components/pathItems/Nope\": the document has nothing there"`,
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	n := 0
	for _, l := range lines {
		if strings.Contains(l, `"msg":"skipping OpenAPI operation"`) {
			n++
		}
	}
	if n != len(skips) {
		t.Errorf("%d lines say an operation was skipped; want %d, one per skipped operation:\n%s", n, len(skips), logs)
	}
	for route, reason := range skips {
		if !strings.Contains(logs.String(), `"msg":"skipping OpenAPI operation","openapi":"ops","operation":"`+strings.ReplaceAll(route, `"`, `\"`)+`",`+reason) {
			t.Errorf("no line says %s was skipped with %s:\n%s", route, reason, logs)
		}
	}
	if strings.Contains(logs.String(), "excluded") && strings.Contains(logs.String(), "/excluded/{x}") {
		t.Errorf("an excluded operation was checked:\n%s", logs)
	}
	summary := `"msg":"OpenAPI document loaded","openapi":"ops","operations":14,"tools":5,"excluded":1,"skipped":8,` +
		`"skipped_because":{"cookie_parameter":1,"document":4,"parameter_style":2,"request_body":1}`
	if !strings.Contains(logs.String(), summary) {
		t.Errorf("no summary line %s:\n%s", summary, logs)
	}
	if got := src.Counts()["ops"]; got != (Counts{Operations: 14, Excluded: 1, Tools: 5, Skipped: 8}) {
		t.Errorf("Counts: %+v", got)
	}

	// JSON read as JSON: the summary's surrogate pair is one character.
	list, _ := reg.Snapshot().Lookup("ops_listAttestations")
	if list.Description != "Lists attestations \U0001F600." {
		t.Errorf("description %q", list.Description)
	}
	// Both of the paths that look alike are called where they say.
	res := call(t, reg, "ops_listAttestations", `{"org":"o","subject_digest":"sha256:ab"}`)
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"uri":"/base/orgs/o/attestations/sha256:ab"`) {
		t.Errorf("listAttestations: %s", text(res))
	}
	if res := call(t, reg, "ops_deleteAttestation", `{"org":"o","attestation_id":7}`); res.IsError || !strings.Contains(string(res.Details), `"url":"`+srv.URL+`/base/orgs/o/attestations/7"`) {
		t.Errorf("deleteAttestation: %s %s", text(res), res.Details)
	}
	// A 3.0 $ref's siblings are ignored: the body is the Ref.
	ref, _ := reg.Snapshot().Lookup("ops_createRef")
	if _, err := ref.ValidateArguments(`{"ref":"refs/heads/x"}`); err == nil {
		t.Errorf("createRef accepts a ref without its sha: %s", ref.InputSchema)
	}
	// The response's $ref leads nowhere: any value comes back.
	bad, _ := reg.Snapshot().Lookup("ops_badExample")
	if res := call(t, reg, "ops_badExample", `{"n":3}`); res.IsError || !strings.Contains(text(res), `"uri":"/base/example?n=3"`) {
		t.Errorf("badExample: %s (output schema %s)", text(res), bad.OutputSchema)
	}

	// nullable beside oneOf: null is what clears GitHub's milestone.
	upd, _ := reg.Snapshot().Lookup("ops_updateIssue")
	for _, args := range []string{`{"number":1,"milestone":null}`, `{"number":1,"milestone":3}`, `{"number":1,"milestone":"v1"}`} {
		if _, err := upd.ValidateArguments(args); err != nil {
			t.Errorf("updateIssue(%s): %v\n%s", args, err, upd.InputSchema)
		}
	}
	if _, err := upd.ValidateArguments(`{"number":1,"milestone":true}`); err == nil {
		t.Errorf("updateIssue accepts a boolean milestone: %s", upd.InputSchema)
	}
	res = call(t, reg, "ops_updateIssue", `{"number":1,"milestone":null}`)
	var s seen
	if err := json.Unmarshal(res.StructuredContent, &s); err != nil || s.Method != http.MethodPatch || !cmp.Equal(s.Body, map[string]any{"milestone": nil}) {
		t.Errorf("updateIssue sent %+v (%v)", s, err)
	}
}

// TestSelectionFirst: include and exclude apply before anything is
// checked, so excluding the operations that cannot be tools (or including
// only the ones wanted) leaves nothing to skip.
func TestSelectionFirst(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Name: "ops", Spec: "testdata/operations.json", BaseURL: "http://127.0.0.1:9", Include: []string{"*Attestation*"}},
		{Name: "ops", Spec: "testdata/operations.json", BaseURL: "http://127.0.0.1:9", Exclude: []string{"GET /missing", "externalRef", "needsCookie", "upload", "undeclared", "matrixInQuery", "GET /nested", "excludedBroken", "* /broken-item"}},
	} {
		logs := &strings.Builder{}
		ts, err := Load(t.Context(), cfg, nil, newLogger(logs))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs.String(), "skipping") || !strings.Contains(logs.String(), `"skipped":0`) {
			t.Errorf("include %v, exclude %v: something was checked that was not selected:\n%s", cfg.Include, cfg.Exclude, logs)
		}
		if len(ts) == 0 || slices.ContainsFunc(ts, func(tl tools.Tool) bool { return strings.Contains(tl.Name, "missing") }) {
			t.Errorf("tools %d", len(ts))
		}
	}
}

func newLogger(w *strings.Builder) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// TestUnmatchedPatternsLogged: an include or exclude pattern that matches
// no operation of the document is a warning naming it, as gRPC's are: a
// misspelt operationId (getPetByID) included nothing, or excluded nothing,
// without a word.
func TestUnmatchedPatternsLogged(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "pets", Spec: "testdata/petstore.yaml", BaseURL: "http://127.0.0.1:9",
		Include: []string{"getPetByID", "getPetById", "GET /store/**"},
		Exclude: []string{"deletepet", "* /store/order/{orderId}"}}
	logs := &strings.Builder{}
	ts, err := Load(t.Context(), cfg, nil, newLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 {
		t.Errorf("%d tools; want getPetById and getInventory", len(ts))
	}
	for _, want := range []string{
		`"msg":"OpenAPI include pattern matches no operation of the document","openapi":"pets","pattern":"getPetByID"`,
		`"msg":"OpenAPI exclude pattern matches no operation of the document","openapi":"pets","pattern":"deletepet"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
	for _, matched := range []string{`"pattern":"getPetById"`, `"pattern":"GET /store/**"`, `"pattern":"* /store/order/{orderId}"`} {
		if strings.Contains(logs.String(), matched) {
			t.Errorf("a pattern that matched is logged as matching nothing (%s):\n%s", matched, logs)
		}
	}
}

// pathQueryDoc tells operations that share a path apart as public
// documents do: by a fragment (AWS's "/#Action=…", Box's
// "/files/{id}#add_shared_link"), by a query written in the path
// (Flickr's "/rest?method=…"), or by query pairs written there whose
// values are placeholders (Weatherbit's "/current?city={city}", declared
// as path parameters).
const pathQueryDoc = `{"openapi": "3.0.0", "info": {"title": "paths", "version": "1"},
 "paths": {
  "/#Action=GetSessionToken": {"get": {"operationId": "getSessionToken", "parameters": [
    {"name": "Action", "in": "query", "required": true, "schema": {"type": "string", "enum": ["GetSessionToken"]}},
    {"name": "DurationSeconds", "in": "query", "schema": {"type": "integer"}}]}},
  "/files/{file_id}#add_shared_link": {"put": {"operationId": "addSharedLink", "parameters": [
    {"name": "file_id", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "fields", "in": "query", "required": true, "schema": {"type": "string"}}],
   "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"shared_link": {"type": "object"}}}}}}}},
  "/rest?method=flickr.photos.search&format=json": {"get": {"operationId": "search", "parameters": [
    {"name": "text", "in": "query", "schema": {"type": "string"}}]}},
  "/current?city={city}&country={country}": {"get": {"operationId": "current", "parameters": [
    {"name": "city", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "country", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "units", "in": "query", "schema": {"type": "string"}}]}},
  "/numbers/{country}?{search}=1": {"get": {"operationId": "keyPlaceholder", "parameters": [
    {"name": "country", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "search", "in": "path", "required": true, "schema": {"type": "string"}}]}},
  "/v1/search?term={term}": {"get": {"operationId": "undeclaredTerm"}}
 }}`

// TestPathQueryAndFragment: a path written with a fragment or a query
// sends its query parameters (a fragment is never sent, and what follows
// it was lost with it: AWS's calls went out as "GET /" with no query at
// all) and sends one query, the path's own pairs first (a second "?"
// made Flickr's method "flickr.photos.search?text=…").
func TestPathQueryAndFragment(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	src, reg, logs := newSource(t)
	if err := src.Sync(t.Context(), []Config{{Name: "p", Spec: writeDoc(t, mustJSON(t, pathQueryDoc)), BaseURL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool, args string
		want       request
	}{
		{"p_getSessionToken", `{"Action":"GetSessionToken","DurationSeconds":900}`, request{Method: "GET", URI: "/?Action=GetSessionToken&DurationSeconds=900"}},
		{"p_addSharedLink", `{"file_id":"12","fields":"shared_link","shared_link":{"access":"open"}}`,
			request{Method: "PUT", URI: "/files/12?fields=shared_link", ContentType: "application/json", Body: `{"shared_link":{"access":"open"}}`}},
		{"p_search", `{"text":"red fox"}`, request{Method: "GET", URI: "/rest?method=flickr.photos.search&format=json&text=red+fox"}},
		{"p_current", `{"city":"Raleigh, NC","country":"US","units":"M"}`, request{Method: "GET", URI: "/current?city=Raleigh%2C+NC&country=US&units=M"}},
	} {
		tl, ok := reg.Snapshot().Lookup(tc.tool)
		if !ok {
			t.Errorf("no tool %s:\n%s", tc.tool, logs)
			continue
		}
		if _, err := tl.ValidateArguments(tc.args); err != nil {
			t.Errorf("%s(%s): %v", tc.tool, tc.args, err)
			continue
		}
		if res := call(t, reg, tc.tool, tc.args); res.IsError {
			t.Errorf("%s: %s", tc.tool, text(res))
			continue
		}
		if r := <-got; r != tc.want {
			t.Errorf("%s sent %+v\nwant %+v", tc.tool, r, tc.want)
		}
	}
	for route, reason := range map[string]string{
		"GET /numbers/{country}?{search}=1": `"reason":"the path's query pair \"{search}=1\" holds a placeholder toolwire cannot fill (only key={name})"`,
		"GET /v1/search?term={term}":        `"reason":"the path's query pair term={term}: no parameter \"term\" is declared"`,
	} {
		if !strings.Contains(logs.String(), `"operation":"`+route+`",`+reason) {
			t.Errorf("no line says %s was skipped with %s:\n%s", route, reason, logs)
		}
	}
}

// argNamesDoc names parameters and body members as public APIs do
// (OData's $filter, Rails' ids[], JSON:API's filter[name], a form field
// with spaces), which Anthropic's API refuses as property names.
const argNamesDoc = `{"openapi": "3.0.0", "info": {"title": "names", "version": "1"},
 "paths": {
  "/items": {"get": {"operationId": "list", "parameters": [
    {"name": "$filter", "in": "query", "schema": {"type": "string"}},
    {"name": "$top", "in": "query", "required": true, "schema": {"type": "integer"}},
    {"name": "ids[]", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
    {"name": "filter[name]", "in": "query", "schema": {"type": "string"}},
    {"name": "filter_name", "in": "query", "schema": {"type": "string"}},
    {"name": "X-Request-ID", "in": "header", "schema": {"type": "string"}}]},
   "post": {"operationId": "order", "requestBody": {"required": true, "content": {"application/x-www-form-urlencoded": {"schema": {"type": "object",
    "properties": {"Time in Force": {"type": "string"}, "Quantity": {"type": "integer"}}, "required": ["Quantity"]}}}}}}
 }}`

// TestArgumentNames: every top-level property of an input schema is a
// name Anthropic's API accepts (^[a-zA-Z0-9_.-]{1,64}$; one that is not
// fails every request that offers the tool), and the request still uses
// the document's names.
func TestArgumentNames(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	src, reg, logs := newSource(t)
	if err := src.Sync(t.Context(), []Config{{Name: "n", Spec: writeDoc(t, mustJSON(t, argNamesDoc)), BaseURL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	valid := regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)
	for _, name := range []string{"n_list", "n_order"} {
		tl, ok := reg.Snapshot().Lookup(name)
		if !ok {
			t.Fatalf("no tool %s:\n%s", name, logs)
		}
		var s struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(tl.InputSchema, &s); err != nil {
			t.Fatal(err)
		}
		for k := range s.Properties {
			if !valid.MatchString(k) {
				t.Errorf("%s: property %q: %s", name, k, tl.InputSchema)
			}
		}
		for _, r := range s.Required {
			if _, ok := s.Properties[r]; !ok {
				t.Errorf("%s: required %q is no property: %s", name, r, tl.InputSchema)
			}
		}
		if name == "n_list" {
			// Each renamed argument says which parameter it is.
			for prop, param := range map[string]string{"filter": "$filter", "ids": "ids[]", "filter_name_query": "filter[name]"} {
				d, _ := s.Properties[prop].(map[string]any)["description"].(string)
				if want := fmt.Sprintf("Sent as the query parameter %q.", param); d != want {
					t.Errorf("%s's description %q; want %q", prop, d, want)
				}
			}
		}
	}
	for _, tc := range []struct {
		tool, args string
		want       request
	}{
		{"n_list", `{"filter":"a eq 1","top":5,"ids":["x","y"],"filter_name_query":"f","filter_name":"g"}`,
			request{Method: "GET", URI: "/items?%24filter=a+eq+1&%24top=5&ids%5B%5D=x&ids%5B%5D=y&filter%5Bname%5D=f&filter_name=g"}},
		{"n_order", `{"body":{"Time in Force":"GTC","Quantity":3}}`,
			request{Method: "POST", URI: "/items", ContentType: "application/x-www-form-urlencoded", Body: "Quantity=3&Time+in+Force=GTC"}},
	} {
		if res := call(t, reg, tc.tool, tc.args); res.IsError {
			t.Errorf("%s: %s", tc.tool, text(res))
			continue
		}
		if r := <-got; r != tc.want {
			t.Errorf("%s sent %+v\nwant %+v", tc.tool, r, tc.want)
		}
	}
}

// TestManyArgumentNamesAlike: parameters whose names all come out as the
// same property get its numbers in turn, each number tried once: 20,000
// of them (a𠀀, a𠀁, …, 1.3 MB of document) held serve's start for
// minutes when each tried every number before its own.
func TestManyArgumentNamesAlike(t *testing.T) {
	t.Parallel()
	a := argNames{taken: map[string]bool{"a_query_3": true}, next: map[string]int{}}
	var got []string
	for i := range 6 {
		got = append(got, a.name(fmt.Sprintf("a%c", 0x4e00+i), "query"))
	}
	if want := []string{"a", "a_query", "a_query_2", "a_query_4", "a_query_5", "a_query_6"}; !slices.Equal(got, want) {
		t.Errorf("names %q; want %q", got, want)
	}
	if n := a.next["a_query"]; n != 7 {
		t.Errorf("the next number of a_query is %d; want 7, after the last given", n)
	}
	a.next["a_query"] = 50 // numbers are not tried again from 2
	if got := a.name("a\u4e10", "query"); got != "a_query_50" {
		t.Errorf("after a_query_49: %q; want a_query_50", got)
	}

	params := make([]map[string]any, 2000)
	for i := range params {
		params[i] = map[string]any{"name": fmt.Sprintf("a%c", 0x4e00+i), "in": "query", "schema": map[string]any{"type": "string"}}
	}
	doc := map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "t", "version": "1"},
		"paths": map[string]any{"/x": map[string]any{"get": map[string]any{"operationId": "getX", "parameters": params}}}}
	ts, err := Load(t.Context(), Config{Name: "n", Spec: writeDoc(t, doc), BaseURL: "http://127.0.0.1:1"}, nil, nil)
	if err != nil || len(ts) != 1 {
		t.Fatalf("%d tools, %v", len(ts), err)
	}
	var s struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(ts[0].InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Properties) != len(params) {
		t.Errorf("%d properties for %d parameters", len(s.Properties), len(params))
	}
}

// itemsDoc declares arrays without items, as Discourse's and Vercel's
// documents do: in a body, in a oneOf beside items, and nullable.
const itemsDoc = `{"openapi": "3.0.0", "info": {"title": "items", "version": "1"},
 "paths": {
  "/uploads": {"post": {"operationId": "presign", "requestBody": {"content": {"application/json": {"schema": {"type": "object",
   "properties": {"part_numbers": {"type": "array"}, "tags": {"type": "array", "nullable": true}, "ids": {"type": "array", "items": {"type": "integer"}}}}}}}}},
  "/aliases": {"get": {"operationId": "listAliases", "parameters": [
    {"name": "domain", "in": "query", "schema": {"items": {"type": "string"}, "oneOf": [{"type": "array"}, {"type": "string"}]}}]}}
 }}`

// TestArraysHaveItems: every array in an input schema says what its items
// are, {} when the document does not: OpenAI refuses a tool otherwise
// ("array schema missing items"), and with it the whole request.
func TestArraysHaveItems(t *testing.T) {
	t.Parallel()
	ts, err := Load(t.Context(), Config{Name: "i", Spec: writeDoc(t, mustJSON(t, itemsDoc)), BaseURL: "http://127.0.0.1:9"}, nil, nil)
	if err != nil || len(ts) != 2 {
		t.Fatalf("%d tools, %v", len(ts), err)
	}
	for _, tl := range ts {
		var s any
		if err := json.Unmarshal(tl.InputSchema, &s); err != nil {
			t.Fatal(err)
		}
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				types, _ := v["type"].([]any)
				if (v["type"] == "array" || slices.Contains(types, any("array"))) && v["items"] == nil {
					t.Errorf("%s: an array without items: %s", tl.Name, tl.InputSchema)
				}
				for _, sub := range v {
					walk(sub)
				}
			case []any:
				for _, sub := range v {
					walk(sub)
				}
			}
		}
		walk(s)
	}
	presign := ts[slices.IndexFunc(ts, func(tl tools.Tool) bool { return tl.Name == "i_presign" })]
	if _, err := presign.ValidateArguments(`{"part_numbers":[1,"x"],"tags":null,"ids":[1]}`); err != nil {
		t.Errorf("items {} refuses what the document allows: %v", err)
	}
}

// namelessDoc declares parameters with no name, as documents converted
// from Postman collections do (Notion's "Retrieve a page" has a header
// with no name beside Notion-Version).
const namelessDoc = `{"openapi": "3.0.0", "info": {"title": "nameless", "version": "1"},
 "paths": {
  "/v1/pages/{id}": {"get": {"operationId": "retrievePage", "parameters": [
    {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "Notion-Version", "in": "header", "schema": {"type": "string"}},
    {"name": "", "in": "header", "schema": {"type": "string"}}]}},
  "/v1/search": {"get": {"operationId": "search", "parameters": [
    {"name": "", "in": "query", "required": true, "schema": {"type": "string"}}]}}
 }}`

// TestNamelessParameter: an optional parameter with no name is left out
// of its tool, with a line saying so, and the operation is a tool; a
// required one still skips its operation.
func TestNamelessParameter(t *testing.T) {
	t.Parallel()
	logs := &strings.Builder{}
	ts, err := Load(t.Context(), Config{Name: "n", Spec: writeDoc(t, mustJSON(t, namelessDoc)), BaseURL: "http://127.0.0.1:9"}, nil, newLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "n_retrievePage" || strings.Contains(string(ts[0].InputSchema), `""`) {
		t.Fatalf("want n_retrievePage alone, without the nameless header:\n%s", logs)
	}
	for _, want := range []string{
		`"msg":"leaving out an optional OpenAPI parameter","openapi":"n","operation":"GET /v1/pages/{id}","reason":"an optional header parameter has no name"`,
		`"msg":"skipping OpenAPI operation","openapi":"n","operation":"GET /v1/search","reason":"a parameter has no name"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no line says %s:\n%s", want, logs)
		}
	}
}

// TestFitDepth: an input schema over maxInputBytes is made again with its
// nesting cut shallower only while cutting can change it, at the depths
// it was made at before. A schema that is wide rather than deep (one
// object of hundreds of properties) was made eight times, at every depth
// from 16 down to 3, each time as large: a 1 MB document of 4,000
// operations taking one such body took 28 s of CPU and peaked at 700 MB.
func TestFitDepth(t *testing.T) {
	t.Parallel()
	big := json.RawMessage(strings.Repeat(" ", maxInputBytes+1))
	small := json.RawMessage(`{}`)
	for _, tc := range []struct {
		name  string
		build func(depth int) (json.RawMessage, int) // the schema and the deepest level it reaches
		want  []int                                  // the depths tried
	}{
		{"wide", func(int) (json.RawMessage, int) { return big, 2 }, []int{16}},
		{"deep", func(d int) (json.RawMessage, int) {
			if d > 8 {
				return big, d
			}
			return small, d
		}, []int{16, 14, 12, 10, 8}},
		{"deep at one place", func(d int) (json.RawMessage, int) {
			if d > 4 {
				return big, 5
			}
			return small, 4
		}, []int{16, 4}},
		{"too large however cut", func(d int) (json.RawMessage, int) { return big, d }, []int{16, 14, 12, 10, 8, 6, 4, 3}},
	} {
		var tried []int
		got, err := fitDepth(func(d int) (json.RawMessage, int, error) {
			tried = append(tried, d)
			s, deepest := tc.build(d)
			return s, deepest, nil
		})
		if err != nil || !slices.Equal(tried, tc.want) {
			t.Errorf("%s: tried depths %v; want %v (%v)", tc.name, tried, tc.want, err)
		}
		if want, _ := tc.build(tc.want[len(tc.want)-1]); len(got) != len(want) {
			t.Errorf("%s: made a schema of %d bytes; want %d", tc.name, len(got), len(want))
		}
	}
}

// TestInputSchemasShared: operations that take the same arguments share
// one input schema text, however many tools hold it.
func TestInputSchemasShared(t *testing.T) {
	t.Parallel()
	props := map[string]any{}
	for i := range 300 {
		props[fmt.Sprintf("field_%d", i)] = map[string]any{"type": "string", "description": strings.Repeat("x", 200)}
	}
	paths := map[string]any{}
	for i := range 3 {
		paths[fmt.Sprintf("/r%d/{id}", i)] = map[string]any{"post": map[string]any{"operationId": fmt.Sprintf("op%d", i),
			"parameters":  []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}},
			"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Wide"}}}}}}
	}
	spec := writeDoc(t, map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "w", "version": "1"}, "paths": paths,
		"components": map[string]any{"schemas": map[string]any{"Wide": map[string]any{"type": "object", "properties": props}}}})
	ts, err := Load(t.Context(), Config{Name: "w", Spec: spec, BaseURL: "http://127.0.0.1:9"}, nil, nil)
	if err != nil || len(ts) != 3 {
		t.Fatalf("%d tools, %v", len(ts), err)
	}
	if len(ts[0].InputSchema) <= maxInputBytes {
		t.Fatalf("the schema is %d bytes; the test wants one over %d", len(ts[0].InputSchema), maxInputBytes)
	}
	for _, tl := range ts[1:] {
		if &tl.InputSchema[0] != &ts[0].InputSchema[0] {
			t.Errorf("%s holds a copy of %s's input schema", tl.Name, ts[0].Name)
		}
	}
}

// TestCopiedTextBounded: each $ref written out copies the text of what it
// names, so a small document of many properties naming one schema with a
// long description or a long enum made an input schema that many times
// larger (94 KB made 50 MB). What one input schema copies is bounded at
// maxCopiedBytes; past it a schema is {}, as past maxNodes.
func TestCopiedTextBounded(t *testing.T) {
	t.Parallel()
	enum := make([]any, 5000)
	for i := range enum {
		enum[i] = fmt.Sprintf("v%06d", i)
	}
	for name, target := range map[string]map[string]any{
		"description": {"type": "string", "description": strings.Repeat("d", 50_000)},
		"enum":        {"type": "string", "enum": enum},
		"default":     {"type": "object", "default": map[string]any{"list": enum}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			props := map[string]any{}
			for i := range 1000 {
				props[fmt.Sprintf("a%d", i)] = map[string]any{"$ref": "#/components/schemas/Long"}
			}
			spec := writeDoc(t, map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "c", "version": "1"},
				"paths": map[string]any{"/x": map[string]any{"post": map[string]any{"operationId": "postX",
					"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Many"}}}}}}},
				"components": map[string]any{"schemas": map[string]any{"Long": target, "Many": map[string]any{"type": "object", "properties": props}}}})
			ts, err := Load(t.Context(), Config{Name: "c", Spec: spec, BaseURL: "http://127.0.0.1:9"}, nil, nil)
			if err != nil || len(ts) != 1 {
				t.Fatalf("%d tools, %v", len(ts), err)
			}
			if n := len(ts[0].InputSchema); n > 2*maxCopiedBytes {
				t.Errorf("the input schema is %d bytes; want at most %d", n, 2*maxCopiedBytes)
			}
			var s struct {
				Properties map[string]map[string]any `json:"properties"`
			}
			if err := json.Unmarshal(ts[0].InputSchema, &s); err != nil {
				t.Fatal(err)
			}
			if len(s.Properties) != len(props) || len(s.Properties["a0"]) == 0 {
				t.Errorf("%d properties, a0 %.80v; want %d, the first written out", len(s.Properties), s.Properties["a0"], len(props))
			}
		})
	}
}

// TestListingBounded: a document's tools are held to a listing's bounds,
// as an MCP server's are. Every operation naming one large body writes it
// out and declares it again: 4000 operations naming one 98 KB schema, a
// 690 KB document, took 15 s of CPU and declared 394 MB. Past a bound the
// operations left are cut, counted and not made; an override naming one
// of them is still one that names an operation.
func TestListingBounded(t *testing.T) {
	t.Parallel()
	props := map[string]any{}
	for i := range 300 {
		props[fmt.Sprintf("field_%d", i)] = map[string]any{"type": "string", "description": strings.Repeat("x", 200)}
	}
	paths := map[string]any{}
	for i := range 10 {
		paths[fmt.Sprintf("/r%d", i)] = map[string]any{"post": map[string]any{"operationId": fmt.Sprintf("op%d", i),
			"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Wide"}}}}}}
	}
	b, err := json.Marshal(map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "w", "version": "1"}, "paths": paths,
		"components": map[string]any{"schemas": map[string]any{"Wide": map[string]any{"type": "object", "properties": props}}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Name: "w", BaseURL: "http://127.0.0.1:9", Operations: map[string]Override{"op9": {Description: "the last"}}}
	ts, _, err := build(c, d, &httpsource.Sender{}, listing.Default)
	if err != nil || len(ts) != 10 {
		t.Fatalf("%d tools within the default bounds, %v; want 10", len(ts), err)
	}
	one := listing.Size(ts[0])
	for _, tc := range []struct {
		name   string
		bounds listing.Bounds
		want   int
	}{
		{"bytes", listing.Bounds{Tools: 100, Bytes: 4*one + one/2, Pages: 1}, 4},
		{"tools", listing.Bounds{Tools: 3, Bytes: 64 << 20, Pages: 1}, 3},
	} {
		ts, rep, err := build(c, d, &httpsource.Sender{}, tc.bounds)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(ts) != tc.want || rep.tools != tc.want || rep.cutOff != 10-tc.want || rep.cut == nil {
			t.Errorf("%s: %d tools (report %d), %d cut off (%v); want %d, %d cut off with a reason", tc.name, len(ts), rep.tools, rep.cutOff, rep.cut, tc.want, 10-tc.want)
		}
	}
}

// TestFilledPathBounded: a path that names one parameter many times
// repeats its argument's value each time; 4000 times made a 250 KB
// argument a 1 GB URL. A path filled past maxPathBytes is refused as the
// arguments' fault and nothing is sent; below it, every placeholder of
// every parameter is filled.
func TestFilledPathBounded(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		got.Store(r.URL.EscapedPath())
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	const k = 100
	params := []any{map[string]any{"name": "a", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}}
	var want strings.Builder
	path := strings.Repeat("/{a}", k)
	for i := range 500 {
		name := fmt.Sprintf("p%d", i)
		params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		path += "/{" + name + "}"
	}
	spec := writeDoc(t, map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "p", "version": "1"},
		"paths": map[string]any{path: map[string]any{"get": map[string]any{"operationId": "getP", "parameters": params}}}})
	src, reg, _ := newSource(t)
	if err := src.Sync(t.Context(), []Config{{Name: "p", Spec: spec, BaseURL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	args := func(a string) string {
		m := map[string]any{"a": a}
		for i := range 500 {
			m[fmt.Sprintf("p%d", i)] = fmt.Sprintf("v%d", i)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}

	res := call(t, reg, "p_getP", args(strings.Repeat("x", maxPathBytes/k)))
	if !res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) || !strings.Contains(text(res), "longer than") || requests.Load() != 0 {
		t.Errorf("a path of %d bytes: %q (kind %d), %d requests sent; want invalid arguments, none sent", len(path)+k*(maxPathBytes/k-3), text(res), res.ErrorKind, requests.Load())
	}

	res = call(t, reg, "p_getP", args("x{p1}"))
	for range k {
		want.WriteString("/x%7Bp1%7D")
	}
	for i := range 500 {
		fmt.Fprintf(&want, "/v%d", i)
	}
	if res.IsError || requests.Load() != 1 || got.Load() != want.String() {
		t.Errorf("%q, %d requests, path %.200q; want the path %.200q", text(res), requests.Load(), got.Load(), want.String())
	}
}

// TestRequiredNamesLinear: required names were kept unique by scanning
// the names kept so far, and allOf's members merged by copying the
// properties and names merged so far once per member: a body of 40,000
// required properties, a 1.5 MB document, took 15 s of CPU (10,000: 1.3
// s). The merge now copies once, whatever the number of members (counted
// in allocations), and each name is looked up in a set.
func TestRequiredNamesLinear(t *testing.T) { // not parallel: AllocsPerRun
	members := make([]any, 1000)
	for i := range members {
		name := fmt.Sprintf("p%d", i)
		members[i] = map[string]any{"type": "object", "properties": map[string]any{name: map[string]any{"type": "string"}}, "required": []string{name, "p0"}}
	}
	var merged map[string]any
	allocs := testing.AllocsPerRun(1, func() {
		merged, _ = mergeAllOf(map[string]any{"properties": map[string]any{"p0": map[string]any{}}, "required": []string{"p0"}}, members)
	})
	if req := merged["required"].([]string); len(req) != len(members) || req[0] != "p0" || req[1] != "p1" || req[len(req)-1] != "p999" || len(merged["properties"].(map[string]any)) != len(members) {
		t.Errorf("merged %d required names (%q…), %d properties; want %d, each once, in order", len(req), req[:min(3, len(req))], len(merged["properties"].(map[string]any)), len(members))
	}
	if allocs > 100 {
		t.Errorf("merging %d members took %.0f allocations; want a copy of the merged properties and names once, not once per member", len(members), allocs)
	}

	names := make([]any, 100_000)
	props := map[string]any{}
	for i := range names {
		names[i] = fmt.Sprintf("p%d", i)
		props[names[i].(string)] = map[string]any{"type": "string"}
	}
	c := (&document{}).requestConverter(maxDepth)
	out := c.schema(map[string]any{"type": "object", "properties": props, "required": append(names, names[:10]...)}, 0).(map[string]any)
	if req := out["required"].([]string); len(req) != len(names) || req[0] != "p0" || req[len(req)-1] != "p99999" {
		t.Errorf("%d required names; want %d, each once, in order", len(req), len(names))
	}
}

// TestManyPathParameters: the path's placeholders and the parameters kept
// are looked up as sets (a search per parameter and per placeholder made
// 40,000 path parameters take 5 s); each placeholder is still declared by
// a parameter the tool keeps, and a path parameter the path does not use
// is still dropped.
func TestManyPathParameters(t *testing.T) {
	t.Parallel()
	const n = 3000
	var path strings.Builder
	params := []any{map[string]any{"name": "unused", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}}
	for i := range n {
		fmt.Fprintf(&path, "/{p%d}", i)
		params = append(params, map[string]any{"name": fmt.Sprintf("p%d", i), "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
	}
	doc := func(params []any) string {
		return writeDoc(t, map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "p", "version": "1"},
			"paths": map[string]any{path.String(): map[string]any{"get": map[string]any{"operationId": "getP", "parameters": params}}}})
	}
	ts, err := Load(t.Context(), Config{Name: "p", Spec: doc(params), BaseURL: "http://127.0.0.1:9"}, nil, nil)
	if err != nil || len(ts) != 1 {
		t.Fatalf("%d tools, %v", len(ts), err)
	}
	var s struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(ts[0].InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Properties) != n || s.Properties["unused"] != nil {
		t.Errorf("%d properties (unused: %v); want %d, without the parameter the path does not use", len(s.Properties), s.Properties["unused"] != nil, n)
	}
	var logs strings.Builder
	ts, err = Load(t.Context(), Config{Name: "p", Spec: doc(params[:n]), BaseURL: "http://127.0.0.1:9"}, nil, newLogger(&logs))
	if err != nil || len(ts) != 0 || !strings.Contains(logs.String(), fmt.Sprintf(`path parameter {p%d} is not declared`, n-1)) {
		t.Errorf("the last placeholder undeclared: %d tools, %v, logs %.300s", len(ts), err, logs.String())
	}
}

// TestDefNamesAlike: response schemas' definitions whose names come out
// alike (a!, a#, … are all "a") are numbered from the last number given,
// not from 2 again: 20,000 of them, a 1.5 MB document, took 38 s of CPU.
func TestDefNamesAlike(t *testing.T) {
	t.Parallel()
	schemas := map[string]any{}
	for _, k := range []string{"a!", "a_3", "a#", "a$", "a%", "a&"} {
		schemas[k] = map[string]any{"type": "string"}
	}
	d := &document{root: map[string]any{"components": map[string]any{"schemas": schemas}}}
	ds := newDefs(d)
	c := &converter{d: d, out: ds, deps: map[*def]bool{}}
	var got []string
	for _, k := range []string{"a!", "a_3", "a#", "a$"} {
		got = append(got, ds.use("#/components/schemas/"+k, c))
	}
	if want := []string{"a", "a_3", "a_2", "a_4"}; !slices.Equal(got, want) {
		t.Errorf("names %q; want %q", got, want)
	}
	if n := ds.next["a"]; n != 5 {
		t.Errorf("the next number of a is %d; want 5, after the last given", n)
	}
	ds.next["a"] = 50 // numbers are not tried again from 2
	if got := ds.use("#/components/schemas/a%", c); got != "a_50" {
		t.Errorf("after a_49: %q; want a_50", got)
	}
}
