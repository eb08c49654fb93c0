package main

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestREADMEConfigTable checks that the README's configuration table names
// every key of the config file and every flag of serve, so a new setting
// cannot ship undocumented.
func TestREADMEConfigTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Configuration\n")
	section, _, _ = strings.Cut(section, "\n## ")
	if section == "" {
		t.Fatal("README has no Configuration section")
	}
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
			t.Errorf("config key %q is not in the README's configuration table", k)
		}
	}
	var cfg serveConfig
	var path string
	serveFlags(&cfg, &path).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(section, "`--"+f.Name+"`") {
			t.Errorf("flag --%s is not in the README's configuration table", f.Name)
		}
	})
}
