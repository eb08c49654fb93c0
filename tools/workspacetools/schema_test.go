package workspacetools_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// TestInferredSchemasAreTheDeclaredOnes pins the input schemas of the tools
// whose schema tools.Typed infers from their Args to what models saw when
// the schemas were written by hand: descriptions, required fields and
// bounds. A change to an Args type or to the inference library that changes
// what models see fails here.
func TestInferredSchemasAreTheDeclaredOnes(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"read_file": `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"the file's path, relative to the workspace"},
			"offset":{"type":"integer","minimum":1,"description":"the first line to return, counting from 1 (default 1)"},
			"limit":{"type":"integer","minimum":1,"description":"the most lines to return (default 2000)"}},
			"required":["path"],"additionalProperties":false}`,
		"write_file": `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"the file's path, relative to the workspace; missing folders are created"},
			"content":{"type":"string","description":"the file's whole new content"}},
			"required":["path","content"],"additionalProperties":false}`,
		"edit_file": `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"the file's path, relative to the workspace"},
			"old_text":{"type":"string","minLength":1,"description":"the exact text to replace, including whitespace and indentation; it must occur exactly once unless replace_all is set"},
			"new_text":{"type":"string","description":"the text to put in its place"},
			"replace_all":{"type":"boolean","description":"replace every occurrence of old_text (default false)"}},
			"required":["path","old_text","new_text"],"additionalProperties":false}`,
		"find_files": `{"type":"object","properties":{
			"pattern":{"type":"string","minLength":1,"description":"glob pattern of paths relative to the workspace: * and ? within a name, ** across folders, {a,b} alternatives, [a-z] classes; for example **/*.go"},
			"content":{"type":"string","description":"optional regular expression (Go RE2 syntax); only files with a matching line are returned, with those lines"}},
			"required":["pattern"],"additionalProperties":false}`,
	}
	e := wt.New(t, nil)
	for _, tool := range workspacetools.Tools(e.WS, workspacetools.Options{}) {
		w, ok := want[tool.Name]
		if !ok {
			continue
		}
		delete(want, tool.Name)
		var wantSchema, got any
		if err := json.Unmarshal([]byte(w), &wantSchema); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(tool.InputSchema, &got); err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		if diff := cmp.Diff(wantSchema, got); diff != "" {
			t.Errorf("%s's input schema (-want +got):\n%s", tool.Name, diff)
		}
		if tool.OutputSchema != nil {
			t.Errorf("%s declares an output schema %s; want none", tool.Name, tool.OutputSchema)
		}
	}
	for name := range want {
		t.Errorf("no tool %s", name)
	}
}
