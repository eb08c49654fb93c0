package httpsource

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolwire/toolwire/internal/redact"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/propagation"
)

// The request layer: what every tool that makes one HTTP request per call
// shares, whoever built the request from the call's arguments. HTTP tools
// (Spec) build theirs from a URL and body template; sources/openapi from
// an operation's parameters. Both escape with PathEscape and url.QueryEscape,
// send secrets with Headers, and read the response with a Sender, so the
// rules of docs/sources.md hold for both.

const (
	// DefaultMaxResponseBytes bounds the response body read for one call
	// when a Sender sets no bound. The server caps the result again
	// (max_result_bytes); this bound is larger so that response_path can
	// select from a big document.
	DefaultMaxResponseBytes = 4 << 20
	// errorExcerptBytes bounds the body quoted in a non-2xx error result.
	errorExcerptBytes = 1 << 10
)

// NewClient returns the HTTP client HTTP tools share: connections are pooled
// across calls, and each call's context (not a client timeout) bounds it. A
// redirect to another host drops the headers filled from the environment,
// so a secret is only ever sent where the config says, and is not followed
// to a loopback, private, link-local or otherwise internal address: the
// tool's own host is the operator's choice, a redirect's is the upstream's
// (or whoever wrote the open redirect a model's arguments reach).
func NewClient() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	guarded := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, ControlContext: refuseInternalDial}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// The address a redirect led to is checked again as it is
			// connected to: its name may resolve elsewhere by now.
			if st, _ := ctx.Value(redirectsKey{}).(*redirects); st != nil && st.left(addr) {
				return guarded.DialContext(ctx, network, addr)
			}
			return dialer.DialContext(ctx, network, addr)
		},
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

// redirectsKey holds a request's *redirects.
type redirectsKey struct{}

// redirects are the addresses (host:port) a request's redirects led to
// away from its own host, which are dialed only to public addresses.
type redirects struct {
	mu    sync.Mutex
	addrs map[string]bool
}

func (r *redirects) add(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.addrs == nil {
		r.addrs = map[string]bool{}
	}
	r.addrs[addr] = true
}

func (r *redirects) left(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs[addr]
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host == via[0].URL.Host {
		// Same host: only the scheme may have changed.
		if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			dropSecrets(req)
		}
		return nil
	}
	// Another host: the secrets would reach someone else, and the
	// answer, which goes to the model, must not come from inside.
	dropSecrets(req)
	if err := checkPublic(req.Context(), req.URL.Hostname()); err != nil {
		return fmt.Errorf("refused a redirect to %s: %w; only the tool's own host may be internal", redact.URL(req.URL.String()), err)
	}
	if st, _ := req.Context().Value(redirectsKey{}).(*redirects); st != nil {
		st.add(hostPort(req.URL))
	}
	return nil
}

func dropSecrets(req *http.Request) {
	names, _ := req.Context().Value(secretHeadersKey{}).([]string)
	for _, name := range names {
		req.Header.Del(name)
	}
}

// hostPort is u's host with its port, as the transport dials it.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// checkPublic says why host (a name or an address) is not a public
// address, or returns nil. A name is resolved; every address it has must
// be public.
func checkPublic(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return checkPublicAddr(ip)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if err := checkPublicAddr(ip); err != nil {
			return fmt.Errorf("%s: %w", host, err)
		}
	}
	return nil
}

// cgnat is the shared address space of RFC 6598, where some clouds keep
// their metadata services (100.100.100.200).
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func checkPublicAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return fmt.Errorf("%s is a loopback address", ip)
	case ip.IsPrivate(), cgnat.Contains(ip):
		return fmt.Errorf("%s is a private address", ip)
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("%s is a link-local address (cloud metadata services live there)", ip)
	case ip.IsUnspecified(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast(), !ip.IsGlobalUnicast():
		return fmt.Errorf("%s is not a public unicast address", ip)
	}
	return nil
}

// refuseInternalDial is the guarded dialer's check of the address it is
// about to connect to.
func refuseInternalDial(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	if err := checkPublicAddr(ap.Addr()); err != nil {
		return fmt.Errorf("refused to connect where a redirect led: %w", err)
	}
	return nil
}

// Headers are headers sent with every request of a tool, whose values may
// hold {{ENV_VAR}}: read from the environment at call time, for every
// call, never stored, logged or returned. Make them with ParseHeaders.
type Headers []headerTemplate

// ParseHeaders checks header names and the names of the environment
// variables their values reference.
func ParseHeaders(h map[string]string) (Headers, error) { return parseHeaders(h) }

// Request is one HTTP request of a call, built from its arguments.
type Request struct {
	Method string
	// URL is absolute, its path and query escaped already (PathEscape,
	// url.QueryEscape); it holds no secrets, since results and details show it.
	URL string
	// Header holds headers filled from the call's arguments (an OpenAPI
	// operation's header parameters); a value with a line break is an
	// error result. The Sender's Headers come after, and win.
	Header http.Header
	// Body is sent when not nil, as ContentType.
	Body []byte
	// ContentType is the body's media type; "" is application/json.
	ContentType string
}

// Sender sends a tool's requests.
type Sender struct {
	Client   *http.Client // nil: http.DefaultClient
	Headers  Headers      // sent with every request, secrets filled in at call time
	MaxBytes int64        // bound on the response body read; 0: DefaultMaxResponseBytes
}

// Response is a response read within the Sender's bound.
type Response struct {
	Status        int
	StatusLine    string // as in "200 OK"
	ContentLength int64  // as sent; -1 when unknown
	Header        http.Header
	Body          []byte // at most MaxBytes
	Truncated     bool   // the body was longer than MaxBytes, or cut off (CutOff)
	MaxBytes      int64  // the bound it was read with
	// CutOff says why a 2xx response's body ended early (the connection
	// lost, the call's deadline): Body is what came before. "" when it
	// was read to its end.
	CutOff  string
	details details
}

// details is what a result's details say about the request, for user
// interfaces; it never holds header values.
type details struct {
	Method    string `json:"method"`
	URL       string `json:"url"`
	Status    int    `json:"status,omitempty"`
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
	CutOff    string `json:"cut_off,omitempty"` // why a 2xx body ended early
}

// Send makes req under ctx and reads its response. A request that could
// not be made (an unset environment variable, a header value with a line
// break, a connection failure) or whose status is not 2xx ends the call
// with the error result it returns, which names the method, URL and status
// and quotes the start of the body; err is the context's cause when ctx
// ended first, for the engine to report as a timeout or cancellation.
// Otherwise the response is returned, for the caller to shape.
func (s *Sender) Send(ctx context.Context, req Request) (*Response, *tools.Result, error) {
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	det := details{Method: req.Method, URL: req.URL}
	hr, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return nil, errorResult(det, "building the request: %v", err), nil
	}
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", "toolwire")
	// The caller's trace continues upstream: traceparent and tracestate of
	// the call's span, as every source sends them; never the baggage an
	// agent sent toolwire (docs/sources.md, "Traces"). Headers the
	// request or the config names are set after, and win.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hr.Header))
	if req.Body != nil {
		ct := req.ContentType
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	for name, vals := range req.Header {
		for _, v := range vals {
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, errorResult(det, "header %s: the value holds a line break or NUL, which a header cannot carry", name), nil
			}
		}
		hr.Header[http.CanonicalHeaderKey(name)] = vals
	}
	var secret []string
	for _, h := range s.Headers {
		v, err := h.resolve()
		if err != nil {
			return nil, errorResult(det, "%v", err), nil
		}
		hr.Header.Set(h.name, v)
		if len(h.vars) > 0 {
			secret = append(secret, h.name)
		}
	}
	rctx := context.WithValue(ctx, redirectsKey{}, &redirects{})
	if len(secret) > 0 {
		rctx = context.WithValue(rctx, secretHeadersKey{}, secret)
	}
	hr = hr.WithContext(rctx)
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	maxBytes := s.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResponseBytes
	}

	resp, err := client.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, context.Cause(ctx)
		}
		// *url.Error names the method and URL, which hold no secrets.
		if !idempotent(req.Method) && !unsent(err) {
			// The connection broke after the request went: the server
			// may have done it, and a model told only "request failed"
			// would send it again.
			return nil, errorResult(det, "request failed: %v (the request was sent, so the server may have done it before the connection broke: check before sending it again)", err), nil
		}
		return nil, errorResult(det, "request failed: %v", err), nil
	}
	defer resp.Body.Close()
	det.Status = resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	ok := resp.StatusCode >= 200 && resp.StatusCode <= 299
	out := &Response{Status: resp.StatusCode, StatusLine: resp.Status, ContentLength: resp.ContentLength, Header: resp.Header, MaxBytes: maxBytes}
	switch {
	case err != nil && ok && ctx.Err() != nil && idempotent(req.Method):
		// Sending it again does no harm: the timeout or cancellation
		// says what happened.
		return nil, nil, context.Cause(ctx)
	case err != nil && ok:
		// The server said it did what was asked; only the rest of its
		// answer was lost. An error (or, for a POST or PATCH, the
		// deadline's timeout) would tell the model the call failed, and
		// a retry would do it twice: the answer is what came, marked as
		// cut off.
		out.CutOff = err.Error()
		if ctx.Err() != nil {
			out.CutOff = fmt.Sprintf("the call's time ran out while the response was read (%v)", context.Cause(ctx))
		}
		det.CutOff = out.CutOff
		out.Truncated = true
	case err != nil && ctx.Err() != nil:
		return nil, nil, context.Cause(ctx)
	case err != nil:
		return nil, errorResult(det, "%s %s: reading the response: %v", req.Method, req.URL, err), nil
	}
	if int64(len(data)) > maxBytes {
		data, out.Truncated = data[:maxBytes], true
	}
	out.Body = data
	det.Bytes, det.Truncated = len(data), out.Truncated
	out.details = det
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, errorResult(det, "%s %s: HTTP %s: %s", req.Method, req.URL, resp.Status, excerpt(data, errorExcerptBytes)), nil
	}
	return out, nil, nil
}

// idempotent reports whether sending a request of method twice has the
// effect of sending it once (RFC 9110, 9.2.2).
// unsent reports whether err, client.Do's, says the request never
// reached a server: no connection (dialling, a name that does not
// resolve, a proxy's refusal), or a TLS handshake that failed.
func unsent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	return errors.As(err, &dns) || errors.As(err, &cert) || errors.As(err, &rec) ||
		errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// Result is res with the response's details: method, URL, status, bytes.
func (r *Response) Result(res *tools.Result) *tools.Result { return withDetails(res, r.details) }

// Errorf is an error result with the response's details, its message
// starting with the method and URL.
func (r *Response) Errorf(format string, args ...any) *tools.Result {
	return errorResult(r.details, "%s %s: %s", r.details.Method, r.details.URL, fmt.Sprintf(format, args...))
}

// Text is the response body as the result's text, marked when it was cut.
func (r *Response) Text() *tools.Result {
	text := strings.ToValidUTF8(string(r.Body), "\uFFFD")
	switch {
	case r.CutOff != "":
		text += fmt.Sprintf("\n[response cut off after %d bytes: %s. The server had answered %s, so the request was done: sending it again would do it again]", len(r.Body), r.CutOff, r.StatusLine)
	case r.Truncated:
		text += fmt.Sprintf("\n[response truncated: only the first %d bytes were read]", r.MaxBytes)
	}
	return r.Result(tools.Text(text))
}

// Structured is the JSON response as the result's text and, when
// structured is true (the tool declares an output schema), as its
// structured content, which the engine checks against that schema. An
// empty body (204 No Content) is a text result saying the status. A 2xx
// body that cannot be structured content (it is not JSON, or was cut) is
// still the upstream's answer: it is the result's text, and its details
// say why it has no structured content ("unstructured"), never an error
// result, since the request may have done what it was asked.
func (r *Response) Structured(structured bool) *tools.Result {
	if r.CutOff != "" {
		res := r.Text()
		res.Details = r.detailsWith("the response was cut off")
		return res
	}
	if len(bytes.TrimSpace(r.Body)) == 0 {
		return r.Result(tools.Text(fmt.Sprintf("HTTP %d %s", r.Status, http.StatusText(r.Status))))
	}
	if !structured {
		return r.Text()
	}
	switch {
	case r.Truncated:
		res := r.Text()
		res.Details = r.detailsWith(fmt.Sprintf("the response is larger than %d bytes, too large for structured content", r.MaxBytes))
		return res
	case !json.Valid(r.Body):
		res := r.Text()
		res.Details = r.detailsWith("the response is not JSON")
		return res
	}
	res := tools.Text(string(r.Body))
	res.StructuredContent = json.RawMessage(r.Body)
	return r.Result(res)
}

// detailsWith is the response's details with why it has no structured
// content.
func (r *Response) detailsWith(unstructured string) json.RawMessage {
	d := struct {
		details
		Unstructured string `json:"unstructured"`
	}{r.details, unstructured}
	b, _ := json.Marshal(d)
	return b
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
