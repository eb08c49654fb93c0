// Package httpsource turns declarative HTTP tool specs, as written under
// http_tools: in toolwire's config file, into ordinary tools: the model's
// arguments fill the URL and body, secrets come from the environment at call
// time, and the JSON response (or the part response_path selects) becomes
// the result. Source serves them in the registry as the source "http"; the
// package owns the http_tools part of the config (Spec). Under the templates
// lies the request layer other sources share (request.go: Request, Sender,
// Headers, PathEscape, ArgText): secrets read at call time, bounded
// responses, cancellation, header parameters and structured content.
// It must not import service/ or cmd/.
package httpsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolwire/toolwire/internal/configfile"
	"github.com/toolwire/toolwire/internal/envref"
	"github.com/toolwire/toolwire/internal/redact"
	"github.com/toolwire/toolwire/tools"
)

// Spec is one HTTP tool as declared in the config file.
type Spec struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description"`
	// Method is GET (the default), HEAD, POST, PUT, PATCH or DELETE.
	Method string `json:"method,omitempty"`
	// URL is an http or https URL whose path and query may hold {field}
	// placeholders naming properties of Parameters.
	URL string `json:"url"`
	// Headers are sent with every request; values may hold {{ENV_VAR}},
	// read from the environment at call time.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is a JSON template for POST, PUT and PATCH: a string that is
	// exactly "{field}" becomes the argument's JSON value, and {field}
	// inside a longer string the argument's text. Without Body those
	// methods send the arguments no URL placeholder used.
	Body json.RawMessage `json:"body,omitempty"`
	// Parameters is the JSON Schema of the arguments; default
	// {"type":"object"}.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// ResponsePath selects part of a JSON response, as in data.items[0].name
	// or data.items.0.name; a path that leads nowhere gives null. Without it
	// the result is the response body as it came.
	ResponsePath string `json:"response_path,omitempty"`
	// Timeout bounds one call; default the server's call timeout.
	Timeout Duration `json:"timeout,omitempty"`
	// ReadOnly lets the tool's calls share a parallel lane; default false.
	ReadOnly    bool `json:"read_only,omitempty"`
	Idempotent  bool `json:"idempotent,omitempty"`
	Destructive bool `json:"destructive,omitempty"`
}

// Duration is a time.Duration written as a string such as "10s": the
// config file's duration type, under this package's name so that code
// outside toolwire can still fill in a Spec's Timeout.
type Duration = configfile.Duration

var (
	// A placeholder is {name}; other braces, as in "{ user { id } }", are
	// literal text.
	placeholderRE = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_-]*)\}`)
	envRefRE      = regexp.MustCompile(`\{\{([^{}]*)\}\}`)
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	nameRE        = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
)

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// hasBody reports whether requests of method carry a body.
func hasBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// Tools checks specs and returns their tools, which share client (nil means
// a new client with NewClient). The error names the tool and the problem:
// a bad name or method, a URL that is not http(s), a placeholder that is not
// a declared property, a bad header or environment variable name, a body
// with GET/HEAD/DELETE, a bad response_path, a schema that does not compile,
// a name used twice.
func Tools(specs []Spec, client *http.Client) ([]tools.Tool, error) {
	if client == nil {
		client = NewClient()
	}
	out := make([]tools.Tool, 0, len(specs))
	seen := make(map[string]bool, len(specs))
	var errs []error
	for i, s := range specs {
		t, err := s.tool(client)
		if err != nil {
			errs = append(errs, fmt.Errorf("http_tools[%d]: %w", i, err))
			continue
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("http_tools[%d]: tool %q: name used twice", i, t.Name))
			continue
		}
		seen[t.Name] = true
		// A registry compiles the schema, so a schema that does not compile
		// is reported now, naming the tool, rather than when it is served.
		if _, err := tools.NewRegistry(t); err != nil {
			errs = append(errs, fmt.Errorf("http_tools[%d]: %w", i, err))
			continue
		}
		out = append(out, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// tool checks s and builds its tool.
func (s Spec) tool(client *http.Client) (tools.Tool, error) {
	if !nameRE.MatchString(s.Name) {
		return tools.Tool{}, fmt.Errorf("tool %q: name must match [A-Za-z0-9_.-]{1,128}", s.Name)
	}
	fail := func(format string, args ...any) (tools.Tool, error) {
		return tools.Tool{}, fmt.Errorf("tool %q: %s", s.Name, fmt.Sprintf(format, args...))
	}
	method := strings.ToUpper(s.Method)
	if method == "" {
		method = http.MethodGet
	}
	if !slices.Contains(methods, method) {
		return fail("method %q: want one of %s", s.Method, strings.Join(methods, ", "))
	}
	if s.Timeout < 0 {
		return fail("negative timeout")
	}
	params := s.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object"}`)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(params, &schema); err != nil {
		return fail("parameters must be a JSON Schema object: %v", err)
	}
	if err := checkParameters(params); err != nil {
		return fail("%v", err)
	}

	u, err := parseURL(s.URL, schema.Properties)
	if err != nil {
		return fail("url: %v", err)
	}
	hdrs, err := parseHeaders(s.Headers)
	if err != nil {
		return fail("%v", err)
	}
	var body *bodyTemplate
	if len(s.Body) > 0 {
		if !hasBody(method) {
			return fail("body: %s requests carry no body; use POST, PUT or PATCH, or put the fields in the URL", method)
		}
		if body, err = parseBody(s.Body, schema.Properties); err != nil {
			return fail("body: %v", err)
		}
	}
	path, err := parsePath(s.ResponsePath)
	if err != nil {
		return fail("response_path %q: %v", s.ResponsePath, err)
	}

	r := &requester{
		method:  method,
		url:     u,
		body:    body,
		path:    path,
		rawBody: s.ResponsePath == "",
		send:    Sender{Client: client, Headers: hdrs, MaxBytes: DefaultMaxResponseBytes},
	}
	return tools.Tool{
		Name:        s.Name,
		Title:       s.Title,
		Description: s.Description,
		InputSchema: params,
		Annotations: tools.Annotations{
			ReadOnly:    s.ReadOnly,
			Idempotent:  s.Idempotent,
			Destructive: s.Destructive,
			OpenWorld:   true, // it reaches an outside system by definition
		},
		Timeout: time.Duration(s.Timeout),
		Source:  tools.SourceHTTP,
		Handler: r.call,
	}, nil
}

// checkFields checks that every {field} in text names a declared property,
// and returns the fields in order.
func checkFields(text string, props map[string]json.RawMessage) ([]string, error) {
	var fields []string
	for _, m := range placeholderRE.FindAllStringSubmatch(text, -1) {
		f := m[1]
		if _, ok := props[f]; !ok {
			if strings.Contains(text, "{{"+f+"}}") {
				return nil, fmt.Errorf("{{%s}}: environment variables go in headers only, which a secret belongs in; the URL and body take arguments, {field}", f)
			}
			return nil, fmt.Errorf("placeholder {%s} is not a property declared in parameters", f)
		}
		fields = append(fields, f)
	}
	return fields, nil
}

// parseURL checks the URL template: http or https, a host without
// placeholders (so the model cannot choose where a request goes), and
// placeholders in the path and query naming declared properties.
func parseURL(raw string, props map[string]json.RawMessage) (*urlTemplate, error) {
	if raw == "" {
		return nil, errors.New("missing")
	}
	rest, _, _ := strings.Cut(raw, "#")
	pathPart, query, _ := strings.Cut(rest, "?")
	scheme, afterScheme, ok := strings.Cut(pathPart, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil, fmt.Errorf("%q: want an http:// or https:// URL", redact.URL(raw))
	}
	host, path, _ := strings.Cut(afterScheme, "/")
	if host == "" {
		return nil, fmt.Errorf("%q: no host", redact.URL(raw))
	}
	if strings.Contains(host, "@") {
		// Not quoted: the error is logged.
		return nil, errors.New("credentials in the URL would show in results and logs; send them in a header from {{ENV_VAR}}")
	}
	if strings.ContainsAny(host, "{}") {
		return nil, fmt.Errorf("%q: placeholders may appear only in the path and query, not the host", raw)
	}
	path = "/" + path
	// The template with every placeholder filled must be a valid URL.
	probe := placeholderRE.ReplaceAllString(scheme+"://"+host+path+"?"+query, "x")
	if _, err := url.Parse(probe); err != nil {
		return nil, err
	}
	t := &urlTemplate{base: scheme + "://" + host, path: path, used: map[string]bool{}, declared: map[string]bool{}}
	for p := range props {
		t.declared[p] = true
	}
	fields, err := checkFields(path, props)
	if err != nil {
		return nil, err
	}
	for _, f := range fields {
		t.used[f] = true
	}
	if query != "" {
		for pair := range strings.SplitSeq(query, "&") {
			if pair == "" {
				continue
			}
			fields, err := checkFields(pair, props)
			if err != nil {
				return nil, err
			}
			for _, f := range fields {
				t.used[f] = true
			}
			t.query = append(t.query, pair)
		}
	}
	return t, nil
}

// parseHeaders checks header names and the environment variables their
// values name.
func parseHeaders(h map[string]string) ([]headerTemplate, error) {
	out := make([]headerTemplate, 0, len(h))
	for name, value := range h {
		if !headerNameRE.MatchString(name) {
			return nil, fmt.Errorf("header %q: not a valid header name", name)
		}
		var vars []string
		for _, m := range envRefRE.FindAllStringSubmatch(value, -1) {
			if !envNameRE.MatchString(m[1]) {
				return nil, fmt.Errorf("header %q: {{%s}}: environment variable names are letters, digits and _, not starting with a digit", name, m[1])
			}
			vars = append(vars, m[1])
		}
		if strings.ContainsAny(envRefRE.ReplaceAllString(value, ""), "\r\n") {
			return nil, fmt.Errorf("header %q: value holds a line break", name)
		}
		if err := envref.CheckSecret(value); err != nil {
			return nil, fmt.Errorf("header %q: %w", name, err)
		}
		out = append(out, headerTemplate{name: http.CanonicalHeaderKey(name), value: value, vars: vars})
	}
	slices.SortFunc(out, func(a, b headerTemplate) int { return strings.Compare(a.name, b.name) })
	return out, nil
}
