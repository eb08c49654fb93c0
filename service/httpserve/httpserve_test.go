package httpserve_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolwire/toolwire/service/httpserve"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs s on a loopback listener until the test ends (or stop is
// called) and returns its base URL and stop, which returns Serve's error.
func serve(t *testing.T, s *httpserve.Server) (string, func() error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	var stopped error
	var once bool
	stop := func() error {
		if !once {
			once = true
			cancel()
			stopped = <-done
		}
		return stopped
	}
	t.Cleanup(func() { stop() })
	return "http://" + lis.Addr().String(), stop
}

func echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		w.Header().Set("X-Proto", r.Proto)
		_, _ = w.Write(b)
	})
}

// TestBodyLimit checks a body past MaxBodyBytes is refused with 413 and a
// Connect error body, whether its length is declared or not, and that the
// handler sees no more than the limit. A chunked body is found too large
// only while the handler reads it; whatever the handler answers then (as
// connect-go's 429 here), the client gets the port's 413, in the request's
// protocol, over HTTP/1.1 and HTTP/2.
func TestBodyLimit(t *testing.T) {
	s := httpserve.New(httpserve.Config{MaxBodyBytes: 1024}, nil, nil)
	s.Handle("POST /echo", echo(), nil)
	// As connect-go answers a read past the limit: resource_exhausted, 429.
	s.Handle("POST /rpc", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.Header().Set("X-Handler", "429")
			httpserve.WriteError(w, http.StatusTooManyRequests, "resource_exhausted", err.Error())
			return
		}
		_, _ = io.WriteString(w, "read")
	}), nil)
	s.Handle("POST /custom", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		http.Error(w, fmt.Sprint(err), http.StatusBadRequest)
	}), func(w http.ResponseWriter, r *http.Request, status int, code, message string) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "custom "+code)
	})
	url, _ := serve(t, s)
	resp, err := http.Post(url+"/echo", "application/json", bytes.NewReader(make([]byte, 10<<20)))
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Code, Message string }
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Code != "resource_exhausted" || !strings.Contains(e.Message, "http_max_body_bytes") {
		t.Errorf("a 10 MB body: %d %+v; want 413 resource_exhausted naming http_max_body_bytes", resp.StatusCode, e)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: protocols}}
	defer h2.CloseIdleConnections()
	for name, c := range map[string]*http.Client{"HTTP/1.1": http.DefaultClient, "HTTP/2": h2} {
		chunked := func(path, contentType string) *http.Response {
			t.Helper()
			// A reader of unknown length: no Content-Length is sent.
			resp, err := c.Post(url+path, contentType, io.MultiReader(strings.NewReader(strings.Repeat("x", 4096))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			return resp
		}
		resp := chunked("/rpc", "application/json")
		var e struct{ Code, Message string }
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Code != "resource_exhausted" || !strings.Contains(e.Message, "http_max_body_bytes") || resp.Header.Get("X-Handler") != "" {
			t.Errorf("%s: a chunked 4 KiB Connect request: %d %v %+v; want the port's 413 resource_exhausted naming http_max_body_bytes", name, resp.StatusCode, resp.Header, e)
		}
		resp = chunked("/rpc", "application/grpc-web+proto")
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "8" || !strings.Contains(resp.Header.Get("Grpc-Message"), "http_max_body_bytes") {
			t.Errorf("%s: a chunked 4 KiB gRPC-Web request: %d %v; want grpc-status 8 (RESOURCE_EXHAUSTED) naming http_max_body_bytes", name, resp.StatusCode, resp.Header)
		}
		resp = chunked("/custom", "application/json")
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "custom resource_exhausted" {
			t.Errorf("%s: a chunked 4 KiB request to a route with its own Refuse: %d %q", name, resp.StatusCode, b)
		}
		resp = chunked("/echo", "application/json")
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: a chunked 4 KiB body: %d; want 413", name, resp.StatusCode)
		}
		resp, err = c.Post(url+"/rpc", "application/json", io.MultiReader(strings.NewReader("small")))
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "read" {
			t.Errorf("%s: a small chunked body: %d %q", name, resp.StatusCode, b)
		}
	}
	resp, err = http.Post(url+"/echo", "application/json", strings.NewReader("small"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "small" {
		t.Errorf("a small body: %d %q", resp.StatusCode, b)
	}
}

// TestSlowBody checks a client that sends its body slowly is cut off at
// ReadTimeout, and other clients are served meanwhile.
func TestSlowBody(t *testing.T) {
	s := httpserve.New(httpserve.Config{ReadTimeout: 300 * time.Millisecond}, nil, nil)
	s.Handle("POST /echo", echo(), nil)
	url, _ := serve(t, s)
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nabc")
	resp, err := http.Post(url+"/echo", "text/plain", strings.NewReader("other"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "other" {
		t.Errorf("another client beside a slow one: %q", b)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	got, _ := io.ReadAll(conn) // the handler's read fails at the timeout; the connection closes
	if strings.Contains(string(got), "200 OK") || time.Since(start) > 9*time.Second {
		t.Errorf("the slow body: %q after %v; want it cut off at the read timeout", got, time.Since(start))
	}
}

// TestH2C checks the plaintext port speaks HTTP/2 to a client that asks
// for it (gRPC and Connect streaming need it) and HTTP/1.1 otherwise.
func TestH2C(t *testing.T) {
	s := httpserve.New(httpserve.Config{}, nil, nil)
	s.Handle("POST /echo", echo(), nil)
	url, _ := serve(t, s)
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: protocols}}
	for name, c := range map[string]*http.Client{"HTTP/2.0": h2, "HTTP/1.1": http.DefaultClient} {
		resp, err := c.Post(url+"/echo", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Proto"); got != name {
			t.Errorf("client for %s: the handler saw %s", name, got)
		}
	}
	h2.CloseIdleConnections()
}

// TestCORS checks CORS is off by default (no Access-Control headers) and,
// with origins configured, answers a preflight for those origins only.
func TestCORS(t *testing.T) {
	preflight := func(s *httpserve.Server, origin string) http.Header {
		req := httptest.NewRequest(http.MethodOptions, "http://localhost:8080/toolwire.v1.ToolService/CallTool", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type") // as browsers send them: lower case, sorted
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.Header()
	}
	off := httpserve.New(httpserve.Config{}, nil, nil)
	if h := preflight(off, "https://app.example"); h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS off by default, but: %v", h)
	}
	on := httpserve.New(httpserve.Config{CORSOrigins: []string{"https://app.example"}}, nil, nil)
	h := preflight(on, "https://app.example")
	if h.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("a configured origin's preflight: %v", h)
	}
	if h := preflight(on, "https://evil.example"); h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin's preflight was allowed: %v", h)
	}
	for _, bad := range []string{"https://app.example/", "https://app.example/path", "null"} {
		if err := (httpserve.Config{CORSOrigins: []string{bad}}).Validate(); err == nil {
			t.Errorf("the origin %q is valid", bad)
		}
	}
	if err := (httpserve.Config{CORSOrigins: []string{"app.example"}}).Validate(); err == nil {
		t.Error("an origin without a scheme is valid")
	}
}

// TestTLS checks the port serves HTTPS with the TLS configuration given.
func TestTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil) // only for its test certificate
	ts.StartTLS()
	cert := ts.TLS.Certificates[0]
	pool := ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	ts.Close()
	s := httpserve.New(httpserve.Config{}, &tls.Config{Certificates: []tls.Certificate{cert}}, nil)
	s.Handle("POST /echo", echo(), nil)
	url, _ := serve(t, s)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Post(strings.Replace(url, "http://", "https://", 1)+"/echo", "text/plain", strings.NewReader("secure"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "secure" || resp.TLS == nil || resp.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Errorf("over TLS: %q, tls %v, %s", b, resp.TLS != nil, resp.Header.Get("X-Proto"))
	}
}
