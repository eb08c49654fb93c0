package configfile

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// The types below have the shapes of serve's configuration, whose feature
// Configs are embedded at the top level of the file (and the engine's in
// the service's), with nested sections, lists, maps and durations.

type EngineConfig struct {
	CallTimeout      time.Duration   `json:"call_timeout"`
	MaxQueueWait     time.Duration   `json:"max_queue_wait"`
	IdempotencyTTL   time.Duration   `json:"idempotency_ttl"`
	IdempotencyLease time.Duration   `json:"idempotency_lease"`
	SessionTTL       time.Duration   `json:"session_ttl"`
	DrainTimeout     time.Duration   `json:"drain_timeout"`
	MaxCalls         int             `json:"max_calls"`
	Safe             map[string]bool `json:"safe"`
}

type ServiceConfig struct {
	Listen string `json:"listen"`
	EngineConfig
}

type LoggingConfig struct {
	LogFormat string `json:"log_format"`
}

type rule struct {
	Allow []string `json:"allow,omitempty"`
}

type SecurityConfig struct {
	TLSCert string `json:"tls_cert"`
	Auth    struct {
		Permissions map[string]rule `json:"permissions"`
	} `json:"auth"`
}

type sandboxConfig struct {
	ReadOnlyPaths []string `json:"read_only_paths"`
	CPUSeconds    uint64   `json:"cpu_seconds"`
}

type server struct {
	Name    string            `json:"name"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

type httpTool struct {
	Name       string          `json:"name"`
	URL        string          `json:"url"`
	Method     string          `json:"method,omitempty"`
	Timeout    Duration        `json:"timeout,omitempty"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Extra      any             `json:"extra,omitempty"`
}

type fileConfig struct {
	ServiceConfig
	Diag bool `json:"diag"`
	LoggingConfig
	SecurityConfig
	Workspace  string        `json:"workspace"`
	Sandbox    sandboxConfig `json:"sandbox"`
	MCPServers []server      `json:"mcp_servers,omitempty"`
	HTTPTools  []httpTool    `json:"http_tools,omitempty"`
}

func decode(t *testing.T, file string) fileConfig {
	t.Helper()
	var cfg fileConfig
	if err := Decode("toolwire.yaml", []byte(file), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDurationsLeaveOtherValues: a file with durations (which the decoder
// rewrites before sigs.k8s.io/yaml reads it) decodes every other value as
// the same file without them does; an unquoted value for a text key is the
// text written.
func TestDurationsLeaveOtherValues(t *testing.T) {
	t.Parallel()
	rest := `
diag: yes
listen: 8080
workspace: 0777
tls_cert: "0777"
safe: {echo: on, "1": no}
log_format: >-
  json
sandbox:
  read_only_paths: [/usr, '/opt/x y']
  cpu_seconds: 0x10
auth:
  permissions:
    "*": {allow: [echo, "fs.*"]}
`
	durations := "call_timeout: 1m30s\nmax_queue_wait: '2s'\nidempotency_ttl: \"1h\"\nsession_ttl: &ttl 5m\nidempotency_lease: *ttl\n"
	without := decode(t, rest)
	with := decode(t, durations+rest)
	want := without
	want.CallTimeout, want.MaxQueueWait = 90*time.Second, 2*time.Second
	want.IdempotencyTTL, want.SessionTTL, want.IdempotencyLease = time.Hour, 5*time.Minute, 5*time.Minute
	if diff := cmp.Diff(want, with); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if !without.Diag || without.Listen != "8080" || without.Workspace != "0777" || without.TLSCert != "0777" || without.Sandbox.CPUSeconds != 16 {
		t.Errorf("the file without durations decoded unlike sigs.k8s.io/yaml: %+v", without)
	}
}

// TestUnquotedTextIsTheTextWritten checks that an unquoted value YAML 1.1
// would read as a boolean or number, given for a text key at any depth, is
// the text written ("on", "yes", "0777"), not "true" or "511", and not a
// decoding error.
func TestUnquotedTextIsTheTextWritten(t *testing.T) {
	t.Parallel()
	cfg := decode(t, `
workspace: 0777
mcp_servers:
  - name: a
    command: on
    args: [yes, 0x10]
    env: {A: no}
`)
	if len(cfg.MCPServers) != 1 {
		t.Fatalf("mcp_servers: %+v", cfg.MCPServers)
	}
	m := cfg.MCPServers[0]
	got := []string{cfg.Workspace, m.Command, strings.Join(m.Args, ","), m.Env["A"]}
	want := []string{"0777", "on", "yes,0x10", "no"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("text values (-want +got):\n%s", diff)
	}
}

// TestFreeFormValuesAreYAML12: a free-form value (a tool's parameters
// schema, any value) is read as YAML 1.2 too: on, off, yes, no, y and n are
// text, as keys and as values, so a schema's enum: [on, off] is not [true,
// false] and a property named y is not "true"; true, numbers, nulls and
// anchors read as before, and a file that needs no change is left as it
// is.
func TestFreeFormValuesAreYAML12(t *testing.T) {
	t.Parallel()
	cfg := decode(t, `
http_tools:
  - name: lamp
    url: http://x/
    parameters:
      type: object
      properties:
        state: &state {type: string, enum: [on, off], default: no}
        y: {type: integer, maximum: 0x10, minimum: -1.5}
        flag: {type: boolean, default: true, x-none: null}
        again: *state
    extra: [yes, n, 7]
`)
	got := string(cfg.HTTPTools[0].Parameters)
	want := `{"properties":{"again":{"default":"no","enum":["on","off"],"type":"string"},"flag":{"default":true,"type":"boolean","x-none":null},"state":{"default":"no","enum":["on","off"],"type":"string"},"y":{"maximum":16,"minimum":-1.5,"type":"integer"}},"type":"object"}`
	if got != want {
		t.Errorf("parameters:\n got %s\nwant %s", got, want)
	}
	if diff := cmp.Diff([]any{"yes", "n", float64(7)}, cfg.HTTPTools[0].Extra); diff != "" {
		t.Errorf("extra (-want +got):\n%s", diff)
	}
	// A value that reads alike either way leaves nothing to rewrite.
	var c yamlChecker
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("{type: object, properties: {a: {enum: [x, true, 1]}}}"), &doc); err != nil {
		t.Fatal(err)
	}
	if err := c.check(doc.Content[0], reflect.TypeFor[json.RawMessage](), "", nil); err != nil || len(c.rewrites) != 0 {
		t.Errorf("a schema YAML 1.1 reads alike: %v, %d rewrites", err, len(c.rewrites))
	}
	// JSON (a generated catalog) holds no text YAML 1.1 could read
	// otherwise: it is not converted a second time; unquoted text is.
	for text, want := range map[string]bool{`{"type":"object","enum":["on",1,true,null,-2.5e3]}`: false, `{enum: [x]}`: true, `{n: 0o17}`: true} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(text), &n); err != nil {
			t.Fatal(err)
		}
		if got := plainText(&n, map[*yaml.Node]bool{}); got != want {
			t.Errorf("plainText(%s) = %v, want %v", text, got, want)
		}
	}
}

// TestDurationField: a Duration field reads as a time.Duration does.
func TestDurationField(t *testing.T) {
	t.Parallel()
	cfg := decode(t, "http_tools:\n  - {name: x, url: 'http://x/', timeout: 1m30s}\n")
	if len(cfg.HTTPTools) != 1 || time.Duration(cfg.HTTPTools[0].Timeout) != 90*time.Second {
		t.Errorf("http_tools: %+v; want one tool with a timeout of 1m30s", cfg.HTTPTools)
	}
}

// TestDurationJSON: a Duration is written as the files write it, and
// read back; zero is left out under omitempty.
func TestDurationJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(httpTool{Name: "x", Timeout: Duration(90 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"x","url":"","timeout":"1m30s"}`; string(b) != want {
		t.Errorf("marshalled %s; want %s", b, want)
	}
	var back httpTool
	if err := json.Unmarshal(b, &back); err != nil || time.Duration(back.Timeout) != 90*time.Second {
		t.Errorf("read back %+v, %v; want a timeout of 1m30s", back, err)
	}
	if b, _ := json.Marshal(httpTool{Name: "x"}); strings.Contains(string(b), "timeout") {
		t.Errorf("a zero timeout was written: %s", b)
	}
}

// TestDecodeErrors: errors name the file, line and column, in YAML's
// words, never Go's or JSON's.
func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "max_calls: 1\nmax_cals: 2\n", `toolwire.yaml:2:1: unknown key "max_cals" (did you mean "max_calls"?)`},
		{"unknown key, nothing close", "max_calls: 1\ncolour: red\n", `toolwire.yaml:2:1: unknown key "colour"`},
		{"unknown nested key", "http_tools:\n  - name: x\n    url: http://x/\n    methd: GET\n", `toolwire.yaml:4:5: unknown key "http_tools[0].methd" (did you mean "method"?)`},
		{"key set twice", "max_calls: 1\nmax_calls: 2\n", `toolwire.yaml:2:1: key "max_calls" is set twice (first on line 1)`},
		{"key set twice, case aside", "max_calls: 1\nMax_Calls: 2\n", `toolwire.yaml:2:1: key "max_calls" is set twice (first on line 1)`},
		{"duration as number", "call_timeout: 30\n", `toolwire.yaml:1:15: call_timeout: want a duration as a string such as "30s", not 30`},
		{"bad duration", "drain_timeout: soon\n", `toolwire.yaml:1:16: drain_timeout: want a duration such as "30s" or "1m30s", not "soon"`},
		{"Duration as number", "http_tools:\n  - {name: x, url: 'http://x/', timeout: 30}\n", `toolwire.yaml:2:42: http_tools[0].timeout: want a duration as a string such as "30s", not 30`},
		{"bad Duration", "http_tools:\n  - {name: x, url: 'http://x/', timeout: soon}\n", `toolwire.yaml:2:42: http_tools[0].timeout: want a duration such as "30s" or "1m30s", not "soon"`},
		{"not an integer", "\n  max_calls: ten\n", `toolwire.yaml:2:14: max_calls: want an integer, not "ten"`},
		{"not a whole number", "sandbox: {cpu_seconds: -1}\n", `toolwire.yaml:1:24: sandbox.cpu_seconds: want a whole number of 0 or more, not "-1"`},
		{"list for a mapping", "safe: [echo]\n", `toolwire.yaml:1:7: safe: want a mapping of keys to values, not a list`},
		{"mapping for a list", "mcp_servers:\n  name: x\n", `toolwire.yaml:2:3: mcp_servers: want a list, not a mapping`},
		{"not YAML", "listen: [\n", "toolwire.yaml:1: did not find expected node content"},
		{"two documents", "max_calls: 1\n---\ncall_timeout: 5s\n", "toolwire.yaml:3: a second YAML document (after ---): a config file holds one; merge them"},
		{"a second document not YAML", "max_calls: 1\n---\nlisten: [\n", "toolwire.yaml:3: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cfg fileConfig
			err := Decode("toolwire.yaml", []byte(tt.yaml), &cfg)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v; want %q", err, tt.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"max_calls", "max_calls", 0}, {"max_cals", "max_calls", 1},
		{"methd", "method", 1}, {"kitten", "sitting", 3}, {"", "abc", 3},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// level is a string type that refuses what it does not know, as a
// TextUnmarshaler.
type level string

func (l *level) UnmarshalText(b []byte) error {
	if string(b) != "debug" && string(b) != "info" {
		return fmt.Errorf("unknown level %q", b)
	}
	*l = level(b)
	return nil
}

// TestQuotedStringsOfCheckedTypes: a quoted value for a string type with
// an unmarshaler of its own is still checked, with its place in the file;
// a quoted value for a plain string is taken as written.
func TestQuotedStringsOfCheckedTypes(t *testing.T) {
	t.Parallel()
	var v struct {
		Level level  `json:"level"`
		Name  string `json:"name"`
	}
	err := Decode("c.yaml", []byte("name: \"x\"\nlevel: \"loud\"\n"), &v)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:2") || !strings.Contains(err.Error(), "unknown level") {
		t.Errorf("a quoted unknown level: %v; want the unmarshaler's error at c.yaml:2", err)
	}
	if err := Decode("c.json", []byte(`{"name": "x: y", "level": "info"}`), &v); err != nil || v.Name != "x: y" || v.Level != "info" {
		t.Errorf("JSON document: %+v, %v", v, err)
	}
}

// TestMapKeysAreTheTextWritten: an unquoted mapping key of a map keyed by
// text (auth.permissions and auth.groups name callers by it) is the text
// written, as the tokens file, a list of callers and every text value
// read it: YAML 1.1 made the caller `yes` "true" and `007` "7", so a
// tokens file's caller yes had none of the permissions written for it
// (a deny list did not apply). The values under such a key read as
// written too, and a key written twice, either way, is refused.
func TestMapKeysAreTheTextWritten(t *testing.T) {
	t.Parallel()
	cfg := decode(t, `
safe: {on: true, y: false}
auth:
  permissions:
    yes: {allow: [on]}
    007: {allow: [a]}
    "true": {allow: [b]}
    alice: {allow: [c]}
mcp_servers:
  - name: a
    env: {NO: x, 1e3: y}
`)
	wantPerm := map[string]rule{"yes": {Allow: []string{"on"}}, "007": {Allow: []string{"a"}}, "true": {Allow: []string{"b"}}, "alice": {Allow: []string{"c"}}}
	if diff := cmp.Diff(wantPerm, cfg.Auth.Permissions); diff != "" {
		t.Errorf("auth.permissions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"on": true, "y": false}, cfg.Safe); diff != "" {
		t.Errorf("safe (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"NO": "x", "1e3": "y"}, cfg.MCPServers[0].Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	var c fileConfig
	err := Decode("t.yaml", []byte("auth:\n  permissions:\n    yes: {allow: [a]}\n    \"yes\": {allow: [b]}\n"), &c)
	if err == nil || !strings.Contains(err.Error(), `t.yaml:4:5: key "auth.permissions.yes" is set twice (first on line 3)`) {
		t.Errorf("a key written twice: %v", err)
	}
}
