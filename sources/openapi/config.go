package openapi

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/toolwire/toolwire/internal/redact"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/supervise"
)

// Config is one OpenAPI document whose operations become tools: an entry
// of the config file's openapi: list.
type Config struct {
	// Name prefixes the tools: operation addPet is offered as
	// "<name>_addPet". Letters, digits and "_" only.
	Name string `json:"name"`
	// Spec is the document: a file path or an http(s) URL, read again on
	// every reload. OpenAPI 3.0, 3.1 and Swagger 2.0 (converted to 3.0),
	// in YAML or JSON.
	Spec string `json:"spec"`
	// BaseURL is where requests go, overriding every server the document
	// names (its operations' too, unless relative to it): the config's
	// secrets go there and nowhere else.
	BaseURL string `json:"base_url,omitempty"`
	// Headers are sent with every request; values may hold {{ENV_VAR}},
	// read from the environment at call time, as HTTP tools' headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Include and Exclude select operations by operationId or by
	// "METHOD /path", each a glob ("get*", "GET /pet/**"); none included
	// means all, and Exclude wins.
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
	// Operations override what the document says of an operation, keyed
	// as Include is (an operationId or "METHOD /path", not a glob).
	Operations map[string]Override `json:"operations,omitempty"`
}

// Override changes one operation's tool.
type Override struct {
	// ReadOnly overrides the default (true for GET and HEAD): read-only
	// calls may share a parallel lane (serve's safe: overrides both).
	ReadOnly *bool `json:"read_only,omitempty"`
	// Timeout bounds one call; default the server's call timeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Description replaces the document's summary and description.
	Description string `json:"description,omitempty"`
}

// Files implements sources.Filer: the document, when it is a file, so an
// edit of it reloads its tools.
func (c Config) Files() []string {
	if c.Spec == "" || strings.Contains(c.Spec, "://") {
		return nil
	}
	return []string{c.Spec}
}

var entryName = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// Validate reports what is wrong with c without reading the document or
// the environment.
func (c Config) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("openapi %q: %s", c.Name, fmt.Sprintf(format, args...))
	}
	if !entryName.MatchString(c.Name) {
		return fail("name must match [A-Za-z0-9_]{1,64}")
	}
	if c.Spec == "" {
		return fail("spec (a file or an http(s) URL) is required")
	}
	if strings.Contains(c.Spec, "://") {
		if u, err := url.Parse(c.Spec); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fail("spec %q: want a file path or an absolute http or https URL", redact.URL(c.Spec))
		}
	}
	if c.BaseURL != "" {
		if err := checkBaseURL(c.BaseURL); err != nil {
			return fail("base_url: %v", err)
		}
	}
	if _, err := httpsource.ParseHeaders(c.Headers); err != nil {
		return fail("%v", err)
	}
	for _, p := range append(slices.Clone(c.Include), c.Exclude...) {
		if !doublestar.ValidatePattern(p) {
			return fail("pattern %q is not a valid glob", p)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Operations)) {
		if c.Operations[k].Timeout < 0 {
			return fail("operations %q: negative timeout", k)
		}
	}
	return nil
}

// checkBaseURL accepts an absolute http(s) URL without credentials.
func checkBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return redact.Error(err, raw)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an absolute http or https URL", redact.URL(raw))
	}
	if u.User != nil {
		return fmt.Errorf("credentials in the URL would show in results and logs; send them in a header from {{ENV_VAR}}")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: a base URL takes no query or fragment", redact.URL(raw))
	}
	return nil
}

// ValidateAll validates every entry and checks that names are unique.
func ValidateAll(cfgs []Config) error {
	return supervise.ValidateAll(cfgs, "openapi", func(c Config) string { return c.Name })
}

// selects reports whether the operation (its operationId, possibly empty,
// and "METHOD /path") is one of c's.
func (c Config) selects(id, route string) bool {
	match := func(patterns []string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { return c.matches(p, id, route) })
	}
	if len(c.Include) > 0 && !match(c.Include) {
		return false
	}
	return !match(c.Exclude)
}

// matches reports whether the include or exclude pattern p matches the
// operation's route ("METHOD /path") or its operationId (id, possibly
// empty). A brace group without a comma is a path parameter, written as
// the document writes it ("DELETE /pet/{petId}"), not doublestar's
// alternation of one choice, which matched the path "/pet/petId" alone.
func (Config) matches(p, id, route string) bool {
	p = pathParam.ReplaceAllString(p, `\{$1\}`)
	if ok, _ := doublestar.Match(p, route); ok {
		return true
	}
	ok, _ := doublestar.Match(p, id)
	return id != "" && ok
}

// pathParam is a brace group without a comma in an include or exclude
// pattern: a path parameter such as {petId}.
var pathParam = regexp.MustCompile(`\{([^{},\\]*)\}`)
