package httpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolwire/toolwire/tools"
)

const (
	// maxResponseBytes bounds the response body read for one call. The
	// server caps the result again (max_result_bytes); this bound is larger
	// so that response_path can select from a big document.
	maxResponseBytes = 4 << 20
	// errorExcerptBytes bounds the body quoted in a non-2xx error result.
	errorExcerptBytes = 1 << 10
)

// NewClient returns the HTTP client HTTP tools share: connections are pooled
// across calls, and each call's context (not a client timeout) bounds it. A
// redirect to another host drops the headers filled from the environment,
// so a secret is only ever sent where the config says.
func NewClient() *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: tr, CheckRedirect: checkRedirect}
}

type secretHeadersKey struct{}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		names, _ := req.Context().Value(secretHeadersKey{}).([]string)
		for _, name := range names {
			req.Header.Del(name)
		}
	}
	return nil
}

// requester runs the calls of one HTTP tool.
type requester struct {
	name     string
	method   string
	url      *urlTemplate
	headers  []headerTemplate
	body     *bodyTemplate // nil: the unused arguments, for methods with a body
	path     []step
	rawBody  bool // no response_path: the body is the result
	client   *http.Client
	maxBytes int64
}

// details is what a result's details say about the request, for user
// interfaces; it never holds header values.
type details struct {
	Method    string `json:"method"`
	URL       string `json:"url"`
	Status    int    `json:"status,omitempty"`
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (r *requester) call(ctx context.Context, call *tools.Call) (*tools.Result, error) {
	doc, err := decodeJSON(call.Arguments)
	if err != nil {
		return nil, fmt.Errorf("decoding arguments: %w", err)
	}
	args, _ := doc.(map[string]any)
	withBody := hasBody(r.method)
	u, err := r.url.build(args, !withBody)
	if err != nil {
		return tools.Errorf("%v", err), nil
	}

	var body io.Reader
	if withBody {
		b, err := r.requestBody(args)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return tools.Errorf("building the request: %v", err), nil
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "toolwire")
	if withBody {
		req.Header.Set("Content-Type", "application/json")
	}
	var secret []string
	for _, h := range r.headers {
		v, err := h.resolve()
		if err != nil {
			return tools.Errorf("%v", err), nil
		}
		req.Header.Set(h.name, v)
		if len(h.vars) > 0 {
			secret = append(secret, h.name)
		}
	}
	if len(secret) > 0 {
		req = req.WithContext(context.WithValue(ctx, secretHeadersKey{}, secret))
	}

	det := details{Method: r.method, URL: u}
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// *url.Error names the method and URL, which hold no secrets.
		return errorResult(det, "request failed: %v", err), nil
	}
	defer resp.Body.Close()
	det.Status = resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, r.maxBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return errorResult(det, "%s %s: reading the response: %v", r.method, u, err), nil
	}
	if int64(len(data)) > r.maxBytes {
		data, det.Truncated = data[:r.maxBytes], true
	}
	det.Bytes = len(data)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorResult(det, "%s %s: HTTP %s: %s", r.method, u, resp.Status, excerpt(data, errorExcerptBytes)), nil
	}
	if r.method == http.MethodHead {
		return withDetails(tools.Text(fmt.Sprintf("HTTP %s; Content-Type %q; Content-Length %d", resp.Status, resp.Header.Get("Content-Type"), resp.ContentLength)), det), nil
	}
	if r.rawBody {
		text := strings.ToValidUTF8(string(data), "\uFFFD")
		if det.Truncated {
			text += fmt.Sprintf("\n[response truncated: only the first %d bytes were read]", r.maxBytes)
		}
		return withDetails(tools.Text(text), det), nil
	}
	if det.Truncated {
		return errorResult(det, "%s %s: the response is larger than %d bytes, too large to select response_path from", r.method, u, r.maxBytes), nil
	}
	v, err := decodeJSON(data)
	if err != nil {
		return errorResult(det, "%s %s: the response is not JSON (%v), so response_path cannot apply; it begins: %s", r.method, u, err, excerpt(data, errorExcerptBytes)), nil
	}
	return withDetails(tools.Text(resultText(selectPath(v, r.path))), det), nil
}

// requestBody is the template filled from args, or else the arguments no
// URL placeholder used.
func (r *requester) requestBody(args map[string]any) ([]byte, error) {
	if r.body != nil {
		return r.body.fill(args)
	}
	rest := make(map[string]any, len(args))
	for k, v := range args {
		if !r.url.used[k] {
			rest[k] = v
		}
	}
	return json.Marshal(rest)
}

func errorResult(d details, format string, args ...any) *tools.Result {
	return withDetails(tools.Errorf(format, args...), d)
}

func withDetails(res *tools.Result, d details) *tools.Result {
	res.Details, _ = json.Marshal(d)
	return res
}

// excerpt returns the start of b as text, at most n bytes, marking a cut.
func excerpt(b []byte, n int) string {
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strings.ToValidUTF8(string(b[:cut]), "\uFFFD") + fmt.Sprintf("… [%d more bytes]", len(b)-cut)
}
