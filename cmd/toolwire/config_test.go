package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Types configKeys takes as one key: those that decode themselves, and
// durations, which the file writes as strings.
var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// configKeys returns the keys of serve's config file, in the order of
// serveConfig's fields: the keys of embedded feature Configs at the top
// level, and those of their struct-valued sections ("sandbox.mode") with
// the section's key before a dot. Lists, maps and types that decode
// themselves are single keys.
func configKeys(t *testing.T) []string {
	var keys []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case tag == "-":
			case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
				walk(prefix, f.Type)
			case !f.IsExported():
			case tag == "":
				t.Errorf("field %s.%s has no YAML key (json tag)", typ, f.Name)
			case f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(jsonUnmarshaler) && f.Type != durationType:
				walk(prefix+tag+".", f.Type)
			default:
				keys = append(keys, prefix+tag)
			}
		}
	}
	walk("", reflect.TypeFor[serveConfig]())
	return keys
}

// TestConfigKeysAreUnique: every key of the config file is written once.
// Two embedded Configs declaring the same key would make encoding/json
// (under sigs.k8s.io/yaml) drop both silently.
func TestConfigKeysAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range configKeys(t) {
		if seen[k] {
			t.Errorf("config key %q is declared twice", k)
		}
		seen[k] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d config keys found; the walk misses the embedded Configs", len(seen))
	}
}

// TestConfigFlagsHaveKeysAndRows sets each flag of serve in turn and finds
// the config key it writes: every flag but --config writes exactly one
// key, and docs/configuration.md's row for that key names the flag. So a
// feature Config cannot register a flag that the file cannot set, or a
// flag the table does not pair with its key.
func TestConfigFlagsHaveKeysAndRows(t *testing.T) {
	t.Parallel()
	var rows []string
	for _, line := range strings.Split(readDoc(t, "../../docs/configuration.md"), "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, line)
		}
	}
	keys := configKeys(t)
	var path string
	base := defaultServeConfig()
	serveFlags(&base, &path).VisitAll(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		cfg := defaultServeConfig()
		fs := serveFlags(&cfg, &path)
		set := false
		for _, v := range []string{"true", "7", "7s", "required", "allow", "100000-100999"} {
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool != (v == "true") {
				continue
			}
			if fs.Set(f.Name, v) == nil {
				set = true
				break
			}
		}
		if !set {
			t.Errorf("--%s: no sample value is accepted", f.Name)
			return
		}
		changed := changedKeys(t, keys, base, cfg)
		if len(changed) != 1 {
			t.Errorf("--%s writes the config keys %q; want exactly one", f.Name, changed)
			return
		}
		if !slices.ContainsFunc(rows, func(row string) bool {
			return strings.Contains(row, "`"+changed[0]+"`") && strings.Contains(row, "`--"+f.Name+"`")
		}) {
			t.Errorf("docs/configuration.md has no row naming both the key %q and its flag --%s", changed[0], f.Name)
		}
	})
}

// changedKeys returns the keys whose values differ between a and b.
func changedKeys(t *testing.T, keys []string, a, b serveConfig) []string {
	t.Helper()
	flat := func(c serveConfig) map[string]string {
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, k := range keys {
			var v any = m
			for part := range strings.SplitSeq(k, ".") {
				if obj, ok := v.(map[string]any); ok {
					v = obj[part]
				}
			}
			s, _ := json.Marshal(v)
			out[k] = string(s)
		}
		return out
	}
	fa, fb := flat(a), flat(b)
	var changed []string
	for _, k := range keys {
		if fa[k] != fb[k] {
			changed = append(changed, k)
		}
	}
	return changed
}

// TestConfigDurationInAList: a duration in a list's entry, such as an MCP
// server's reconnect_timeout, is read as text like the top-level ones.
func TestConfigDurationInAList(t *testing.T) {
	t.Parallel()
	file := `
mcp_servers:
  - name: a
    url: http://127.0.0.1:1/mcp
    reconnect_timeout: 500ms
  - name: b
    command: /bin/true
    ping_timeout: 3s
`
	var cfg serveConfig
	if err := readConfigFile(writeFile(t, "toolwire.yaml", file), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.MCPServers) != 2 || cfg.MCPServers[0].ReconnectTimeout != 500*time.Millisecond || cfg.MCPServers[1].PingTimeout != 3*time.Second {
		t.Errorf("mcp_servers: %+v; want reconnect_timeout 500ms and ping_timeout 3s", cfg.MCPServers)
	}
}

// TestConfigFileIsBounded: a file past maxConfigBytes (a log mistaken for
// the config) is refused, at start and on a reload, rather than read
// whole and decoded; one at the bound is read.
func TestConfigFileIsBounded(t *testing.T) {
	t.Parallel()
	big := writeFile(t, "toolwire.yaml", "# "+strings.Repeat("x", maxConfigBytes)+"\n")
	var cfg serveConfig
	if err := readConfigFile(big, &cfg); err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Errorf("start: %v; want it refused as larger than 16 MiB", err)
	}
	if _, err := rereadConfigFile(big); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("reload: %v; want it refused as too large", err)
	}
	atBound := writeFile(t, "ok.yaml", "listen: 127.0.0.1:0\n# "+strings.Repeat("x", maxConfigBytes-len("listen: 127.0.0.1:0\n# \n"))+"\n")
	if err := readConfigFile(atBound, &cfg); err != nil {
		t.Errorf("a file of %d bytes: %v", maxConfigBytes, err)
	}
}

// TestConfigNegativeRefused: a negative count, size or duration is
// refused naming its key, where each feature read it as 0, its default
// ("max_calls: -1" ran with 1024, "call_timeout: -5s" with 60s); the
// settings whose -1 means something still take it.
func TestConfigNegativeRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, want string }{
		{"max_calls: -1", "max_calls: want a positive number, or 0 for the default, not -1"},
		{"call_timeout: -5s", "call_timeout: want a positive duration, or 0 for the default, not -5s"},
		{"http_read_timeout: -1s", "http_read_timeout: want a positive duration"},
		{"keepalive_time: -1s", "keepalive_time: want a positive duration"},
		{"max_connections: -1", "max_connections: want a positive number"},
		{"audit_max_backups: -1", "audit_max_backups: want a positive number"},
		{"rate_per_caller: -0.5", "rate_per_caller: want a positive number, or 0 for the default, not -0.5"},
		{"max_buffered_bytes: -1", ""},
		{"max_calls_per_caller: -1", ""},
		{"workspace_min_free_bytes: -1", ""},
	} {
		path := writeFile(t, "toolwire.yaml", c.file+"\nno_workspace: true\n")
		_, err := parseServe([]string{"--config", path}, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want it taken", c.file, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want an error containing %q", c.file, err, c.want)
		}
	}
	// Every count and duration of the file is checked, present and future.
	var cfg serveConfig
	var set func(v reflect.Value)
	set = func(v reflect.Value) {
		for i := range v.NumField() {
			switch f := v.Field(i); {
			case !v.Type().Field(i).IsExported():
			case f.Kind() == reflect.Struct:
				set(f)
			case f.CanInt():
				f.SetInt(-1)
			}
		}
	}
	set(reflect.ValueOf(&cfg).Elem())
	refused := 0
	for range 200 {
		err := cfg.checkNegative()
		if err == nil {
			break
		}
		key, _, _ := strings.Cut(err.Error(), ":")
		refused++
		if !clearKey(reflect.ValueOf(&cfg).Elem(), "", key) {
			t.Fatalf("%v: no key %q to clear", err, key)
		}
	}
	if refused < 40 {
		t.Errorf("%d negative settings refused; want every count, size and duration of the file", refused)
	}
}

// clearKey sets the setting at key (as checkNegative names it) to 0.
func clearKey(v reflect.Value, prefix, key string) bool {
	for i := range v.NumField() {
		f, field := v.Type().Field(i), v.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported():
		case f.Anonymous && tag == "" && field.Kind() == reflect.Struct:
			if clearKey(field, prefix, key) {
				return true
			}
		case field.Kind() == reflect.Struct:
			if clearKey(field, prefix+tag+".", key) {
				return true
			}
		case prefix+tag == key && field.CanInt():
			field.SetInt(0)
			return true
		}
	}
	return false
}

// TestConfigRelativePathNotFound: a relative path in a config file kept
// in another directory, not found, says where relative paths are looked
// for; the error named only "stat tokens".
func TestConfigRelativePathNotFound(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", "auth:\n  tokens_file: tokens\n")
	// beside the file, where it is not looked for
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "tokens"), []byte("alice: "+strings.Repeat("a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"serve", "--config", path, "--no-workspace", "--listen", "127.0.0.1:0"}, io.Discard, io.Discard)
	want := "auth.tokens_file tokens: stat tokens: no such file or directory (a relative path in " + path +
		" is relative to the directory serve runs in, " + wd + ", not to the file's, " + filepath.Dir(path) + ")"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("serve: %v; want an error containing %q", err, want)
	}
}
