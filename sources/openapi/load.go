package openapi

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// baseURL is where c's requests go: base_url, or else the document's
// first server, its variables at their defaults, resolved against the
// document's own URL when it is relative.
func baseURL(c Config, d *document) (string, error) {
	if c.BaseURL != "" {
		return strings.TrimSuffix(c.BaseURL, "/"), nil
	}
	var raw, what string
	if d.version == swagger2 {
		raw, what = swaggerServer(d.root), "host and basePath"
		if raw == "" {
			return "", errors.New("the document names no host; set base_url")
		}
	} else {
		list, _ := d.root["servers"].([]any)
		if len(list) == 0 {
			return "", errors.New("the document names no servers; set base_url")
		}
		srv, ok := list[0].(map[string]any)
		if !ok {
			return "", fmt.Errorf("servers[0]: want an object, got %s", kindOf(list[0]))
		}
		raw, what = expandServer(srv), fmt.Sprintf("servers[0].url %q", str(srv, "url"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if !u.IsAbs() {
		spec, err := url.Parse(c.Spec)
		if err != nil || (spec.Scheme != "http" && spec.Scheme != "https") {
			return "", fmt.Errorf("%s is relative to where the document is served, and it was read from a file; set base_url", what)
		}
		u = spec.ResolveReference(u)
	}
	if err := checkBaseURL(u.String()); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// expandServer is a server object's URL with its variables at their
// defaults.
func expandServer(srv map[string]any) string {
	raw := str(srv, "url")
	vars, _ := srv["variables"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if v, ok := vars[name].(map[string]any); ok {
			raw = strings.ReplaceAll(raw, "{"+name+"}", str(v, "default"))
		}
	}
	return raw
}
