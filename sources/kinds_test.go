package sources

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKinds holds kinds to Config: every field of Config has exactly one
// line in kinds under its key, and that line reads that field (each key's
// entry named after the key shows up under the same key in LogAttrs, and
// nowhere else).
func TestKinds(t *testing.T) {
	t.Parallel()
	var fields, keys []string
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		tag, _, _ := strings.Cut(ct.Field(i).Tag.Get("json"), ",")
		fields = append(fields, tag)
	}
	for _, k := range kinds {
		keys = append(keys, k.key)
	}
	if diff := cmp.Diff(fields, keys); diff != "" {
		t.Fatalf("kinds' keys differ from Config's fields (-fields +kinds):\n%s", diff)
	}

	doc := map[string][]map[string]string{}
	var want []any
	for _, key := range keys {
		doc[key] = []map[string]string{{"name": "of_" + key}}
		want = append(want, key, []string{"of_" + key})
	}
	b, _ := json.Marshal(doc)
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, cfg.LogAttrs()); diff != "" {
		t.Errorf("LogAttrs (-want +got):\n%s", diff)
	}
	if cfg.Empty() {
		t.Error("a config declaring one of each kind is Empty")
	}
	if !(Config{}).Empty() {
		t.Error("the zero Config is not Empty")
	}
	for _, k := range kinds {
		one := Config{}
		b, _ := json.Marshal(map[string]any{k.key: doc[k.key]})
		if err := json.Unmarshal(b, &one); err != nil {
			t.Fatal(err)
		}
		if one.Empty() {
			t.Errorf("a config declaring only %s is Empty", k.key)
		}
	}
}

// TestFiles: the files a config's sources read are the OpenAPI documents
// given as paths, not those given as URLs.
func TestFiles(t *testing.T) {
	t.Parallel()
	var cfg Config
	if err := json.Unmarshal([]byte(`{"openapi":[{"name":"a","spec":"docs/a.yaml"},{"name":"b","spec":"https://x/b.yaml"}],"http_tools":[{"name":"h","url":"http://x/"}]}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"docs/a.yaml"}, cfg.Files()); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
}
