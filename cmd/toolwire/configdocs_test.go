package main

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestConfigTableDocumented checks that the configuration page,
// docs/configuration.md, names every key of the config file and every flag of
// serve (in its table, or for --config the line above it), so a new setting
// cannot ship undocumented.
func TestConfigTableDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	var keys []string
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case f.Anonymous && tag == "":
				walk(f.Type)
			case tag != "" && tag != "-":
				keys = append(keys, tag)
			}
		}
	}
	walk(reflect.TypeFor[serveConfig]())
	for _, k := range keys {
		if !strings.Contains(section, "`"+k) {
			t.Errorf("config key %q is not in docs/configuration.md's table", k)
		}
	}
	var cfg serveConfig
	var path string
	serveFlags(&cfg, &path).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(section, "`--"+f.Name+"`") {
			t.Errorf("flag --%s is not in docs/configuration.md's table", f.Name)
		}
	})
}
