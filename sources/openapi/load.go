package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"sigs.k8s.io/yaml"
)

const (
	// maxDocumentBytes bounds a document read from a file or a URL.
	maxDocumentBytes = 16 << 20
	// fetchTimeout bounds reading a document from a URL.
	fetchTimeout = 30 * time.Second
)

// read returns the document spec names: a file, or the body of a GET of
// an http(s) URL.
func read(ctx context.Context, client *http.Client, spec string) ([]byte, error) {
	if !strings.HasPrefix(spec, "http://") && !strings.HasPrefix(spec, "https://") {
		f, err := os.Open(spec)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readBounded(f)
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %s", spec, resp.Status)
	}
	return readBounded(resp.Body)
}

func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDocumentBytes {
		return nil, fmt.Errorf("the document is larger than %d bytes", maxDocumentBytes)
	}
	return b, nil
}

// parse loads a document: OpenAPI 3.x as it is, Swagger 2.0 converted to
// OpenAPI 3.0. Every $ref must point into the document itself. The
// document is validated (examples, defaults and patterns aside, which
// describe values rather than the API's shape); an error names where the
// problem is, as a line for a syntax error or a path in the document
// ("paths./pet/{petId}.get…") for the rest. A panic in the parser is an
// error too: a document is input.
func parse(data []byte) (doc *openapi3.T, err error) {
	defer func() {
		if p := recover(); p != nil {
			doc, err = nil, fmt.Errorf("the document cannot be loaded (the parser failed: %v)", p)
		}
	}()
	var head struct {
		Swagger string `json:"swagger"`
		OpenAPI string `json:"openapi"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("not a YAML or JSON document: %w", err)
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	switch {
	case head.Swagger != "":
		if !strings.HasPrefix(head.Swagger, "2.") {
			return nil, fmt.Errorf("swagger %q: want 2.0, or an OpenAPI 3 document", head.Swagger)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, err
		}
		var doc2 openapi2.T
		if err := json.Unmarshal(js, &doc2); err != nil {
			return nil, fmt.Errorf("swagger 2.0: %w", err)
		}
		if doc, err = openapi2conv.ToV3(&doc2); err != nil {
			return nil, fmt.Errorf("converting swagger 2.0 to OpenAPI 3: %w", err)
		}
		if err := loader.ResolveRefsIn(doc, nil); err != nil {
			return nil, fmt.Errorf("resolving $refs: %w", err)
		}
	case strings.HasPrefix(head.OpenAPI, "3."):
		if doc, err = loader.LoadFromData(data); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("openapi %q: want an OpenAPI 3.0 or 3.1 document (or swagger: \"2.0\")", head.OpenAPI)
	}
	ctx := openapi3.WithValidationOptions(context.Background(),
		openapi3.DisableExamplesValidation(), openapi3.DisableSchemaDefaultsValidation(),
		openapi3.DisableSchemaPatternValidation(), openapi3.DisableSchemaFormatValidation())
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("invalid document: %w", err)
	}
	if doc.Paths == nil || doc.Paths.Len() == 0 {
		return nil, errors.New("the document has no paths")
	}
	return doc, nil
}

// baseURL is where c's requests go: base_url, or else the document's
// first server, its variables at their defaults, resolved against the
// document's own URL when it is relative.
func baseURL(c Config, doc *openapi3.T) (string, error) {
	if c.BaseURL != "" {
		return strings.TrimSuffix(c.BaseURL, "/"), nil
	}
	if len(doc.Servers) == 0 || doc.Servers[0] == nil {
		return "", errors.New("the document names no servers; set base_url")
	}
	srv := doc.Servers[0]
	raw := srv.URL
	for name, v := range srv.Variables {
		if v != nil {
			raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("servers[0].url %q: %w", srv.URL, err)
	}
	if !u.IsAbs() {
		spec, err := url.Parse(c.Spec)
		if err != nil || (spec.Scheme != "http" && spec.Scheme != "https") {
			return "", fmt.Errorf("servers[0].url %q is relative to where the document is served, and it was read from a file; set base_url", srv.URL)
		}
		u = spec.ResolveReference(u)
	}
	if err := checkBaseURL(u.String()); err != nil {
		return "", fmt.Errorf("servers[0].url: %w", err)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}
