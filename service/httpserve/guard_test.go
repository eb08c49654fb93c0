package httpserve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/service/httpserve"
)

// guarded is a port with a route of the default refusals (/rpc/, a
// Connect-style handler) and one of its own (/mcp), counting the requests
// that reach a handler.
type guarded struct {
	s       *httpserve.Server
	reached atomic.Int64
}

func newGuarded(cfg httpserve.Config) *guarded {
	g := &guarded{s: httpserve.New(cfg, nil, nil)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.reached.Add(1)
		_, _ = io.WriteString(w, "served")
	})
	g.s.Handle("/rpc/", h, nil)
	g.s.Handle("/mcp", h, func(w http.ResponseWriter, r *http.Request, status int, code, message string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32015, "message": message, "data": map[string]string{"code": code}}})
	})
	return g
}

// raw sends one HTTP/1.1 request as written, Host and all, and returns the
// response with its body read.
func raw(t *testing.T, addr, method, path, host string, header map[string]string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, path, host)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	body := ""
	if method == http.MethodPost {
		body = "{}"
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s Host %q: %v", method, path, host, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp, string(got)
}

// TestHostAllowList: over loopback, the port answers to localhost and
// loopback addresses (with or without a port, in any case, with a
// trailing dot, IPv6 and IPv4-mapped) and to the names of
// http_allowed_hosts; any other Host gets 403 in the route's protocol
// (Connect's error, or the route's own, here JSON-RPC) before a handler
// runs: the shapes a DNS-rebinding page and its variants send.
func TestHostAllowList(t *testing.T) {
	t.Parallel()
	g := newGuarded(httpserve.Config{})
	url, _ := serve(t, g.s)
	addr := strings.TrimPrefix(url, "http://")
	_, port, _ := net.SplitHostPort(addr)
	allowed := []string{"localhost", "localhost:" + port, "LOCALHOST:" + port, "LocalHost.:" + port, "localhost.",
		"127.0.0.1", "127.0.0.1:" + port, "127.0.0.1.:" + port, "127.9.8.7:" + port, "[::1]:" + port, "[::1]", "[0:0:0:0:0:0:0:1]:" + port, "[::ffff:127.0.0.1]:" + port}
	refused := []string{"evil.example", "evil.example:" + port, "EVIL.example.:" + port,
		"127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port, "evil.example.localhost", "localhost.localdomain",
		"0.0.0.0:" + port, "0.0.0.0", "[::]:" + port, "192.0.2.7:" + port, "[2001:db8::1]:" + port, // not loopback, over loopback
		"127.1:" + port, "0x7f.0.0.1:" + port, "2130706433:" + port, "127.000.000.001:" + port, // forms browsers canonicalize, not addresses here
		"localhost:http", "[::1]x", "[evil.example]:" + port, "local_host..:" + port}
	for _, host := range allowed {
		for _, path := range []string{"/rpc/x", "/mcp"} {
			before := g.reached.Load()
			resp, body := raw(t, addr, http.MethodPost, path, host, map[string]string{"Content-Type": "application/json"})
			if resp.StatusCode != http.StatusOK || body != "served" || g.reached.Load() != before+1 {
				t.Errorf("Host %q %s: %d %q; want it served", host, path, resp.StatusCode, body)
			}
		}
	}
	for _, host := range refused {
		before := g.reached.Load()
		resp, body := raw(t, addr, http.MethodPost, "/rpc/x", host, map[string]string{"Content-Type": "application/json"})
		var e struct{ Code, Message string }
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusForbidden || e.Code != "permission_denied" || !strings.Contains(e.Message, "http_allowed_hosts") {
			t.Errorf("Host %q: %d %q; want 403 permission_denied naming http_allowed_hosts", host, resp.StatusCode, body)
		}
		resp, body = raw(t, addr, http.MethodPost, "/mcp", host, map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `"jsonrpc":"2.0"`) || !strings.Contains(body, "http_allowed_hosts") {
			t.Errorf("Host %q on /mcp: %d %q; want 403 and the route's JSON-RPC error", host, resp.StatusCode, body)
		}
		if g.reached.Load() != before {
			t.Errorf("Host %q reached a handler", host)
		}
	}
	// A gRPC or gRPC-Web client reads the refusal in its own protocol.
	resp, _ := raw(t, addr, http.MethodPost, "/rpc/x", "evil.example", map[string]string{"Content-Type": "application/grpc-web+proto"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "7" || !strings.Contains(resp.Header.Get("Grpc-Message"), "http_allowed_hosts") {
		t.Errorf("a gRPC-Web request of a foreign Host: %d %v; want grpc-status 7 (PERMISSION_DENIED)", resp.StatusCode, resp.Header)
	}
	// /healthz answers whatever the Host: probes name the port as they find it.
	if resp, body := raw(t, addr, http.MethodGet, "/healthz", "10.1.2.3:8080", map[string]string{"Origin": "http://evil.example"}); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz of another Host: %d %q", resp.StatusCode, body)
	}

	// Names listed in http_allowed_hosts; "*." for subdomains.
	listed := newGuarded(httpserve.Config{AllowedHosts: []string{"toolwire.example.com", "*.corp.example", "203.0.113.9", "[2001:db8::5]"}})
	url, _ = serve(t, listed.s)
	addr = strings.TrimPrefix(url, "http://")
	for host, want := range map[string]int{
		"toolwire.example.com": 200, "TOOLWIRE.example.com.:443": 200, "a.corp.example": 200, "a.b.corp.example:8080": 200,
		"203.0.113.9:80": 200, "[2001:db8::5]:443": 200, "localhost:80": 200,
		"corp.example": 403, "evilcorp.example": 403, "toolwire.example.com.evil.example": 403, "eviltoolwire.example.com": 403, "203.0.113.10": 403,
	} {
		if resp, body := raw(t, addr, http.MethodPost, "/rpc/x", host, nil); resp.StatusCode != want {
			t.Errorf("listed names, Host %q: %d %q; want %d", host, resp.StatusCode, body, want)
		}
	}
	anyHost := newGuarded(httpserve.Config{AllowedHosts: []string{"*"}})
	url, _ = serve(t, anyHost.s)
	if resp, body := raw(t, strings.TrimPrefix(url, "http://"), http.MethodPost, "/rpc/x", "evil.example", nil); resp.StatusCode != http.StatusOK {
		t.Errorf(`http_allowed_hosts ["*"], Host evil.example: %d %q; want served`, resp.StatusCode, body)
	}

	for _, bad := range []string{"https://toolwire.example.com", "toolwire.example.com:443", "toolwire.example.com/mcp", "*.", "*example.com", "*.203.0.113.9", "a b", ""} {
		if err := (httpserve.Config{AllowedHosts: []string{bad}}).Validate(); err == nil || !strings.Contains(err.Error(), "http_allowed_hosts") {
			t.Errorf("http_allowed_hosts [%q]: %v; want an error naming the key", bad, err)
		}
	}
}

// TestHostOverTheNetwork: a request that reached the port on a
// non-loopback address may also name an IP address (a page cannot rebind
// an address, and probes and load balancers use them), but not 0.0.0.0 or
// a name nobody listed. (The request's local address is set as net/http
// sets it; TestHostAllowList covers the real loopback listener.)
func TestHostOverTheNetwork(t *testing.T) {
	t.Parallel()
	g := newGuarded(httpserve.Config{AllowedHosts: []string{"toolwire.example.com"}})
	for host, want := range map[string]int{
		"192.0.2.7:8080": 200, "[2001:db8::1]:8080": 200, "localhost:8080": 200, "toolwire.example.com": 200,
		"evil.example:8080": 403, "0.0.0.0:8080": 403, "[::]:8080": 403, "192.0.2.7.evil.example": 403,
	} {
		req := httptest.NewRequest(http.MethodPost, "/rpc/x", strings.NewReader("{}"))
		req.Host = host
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("192.0.2.2"), Port: 8080}))
		w := httptest.NewRecorder()
		g.s.Handler().ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("over the network, Host %q: %d %q; want %d", host, w.Code, w.Body, want)
		}
	}
}

// TestCrossOrigin: a browser request from a page of another origin gets
// 403 before a handler runs, whatever its method (POST, the GET of /mcp's
// stream, an image's GET, a preflight), whether it says so by Origin or
// only by Sec-Fetch-Site, Origin "null" included; a request with no Origin
// (curl, SDKs), a page of the port's own origin, a link followed from
// another site and the origins of http_cors_origins are served.
func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	g := newGuarded(httpserve.Config{CORSOrigins: []string{"https://app.example"}})
	url, _ := serve(t, g.s)
	addr := strings.TrimPrefix(url, "http://")
	_, port, _ := net.SplitHostPort(addr)
	self := "http://127.0.0.1:" + port
	type h = map[string]string
	cases := []struct {
		name   string
		method string
		header h
		want   int
	}{
		{"curl: no Origin", "POST", nil, 200},
		{"own page, an old browser", "POST", h{"Origin": self}, 200},
		{"own page", "POST", h{"Origin": self, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, 200},
		{"typed by the user", "POST", h{"Sec-Fetch-Site": "none"}, 200},
		{"a link from another site", "GET", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, 200},
		{"a listed origin", "POST", h{"Origin": "https://app.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, 200},
		{"a listed origin's preflight", "OPTIONS", h{"Origin": "https://app.example", "Access-Control-Request-Method": "POST", "Sec-Fetch-Site": "cross-site"}, 204},

		{"another site", "POST", h{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, 403},
		{"another site, an old browser", "POST", h{"Origin": "http://evil.example"}, 403},
		{"Origin null (a sandboxed frame, a file)", "POST", h{"Origin": "null"}, 403},
		{"Origin null, cross-site", "POST", h{"Origin": "null", "Sec-Fetch-Site": "cross-site"}, 403},
		{"another port of the same host", "POST", h{"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"}, 403},
		{"localhost under another name, an old browser", "POST", h{"Origin": "http://localhost:" + port}, 403},
		{"https of the same host", "POST", h{"Origin": "https://127.0.0.1:" + port, "Sec-Fetch-Site": "cross-site"}, 403},
		{"a listed origin's http twin", "POST", h{"Origin": "http://app.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"a form post, no Origin", "POST", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, 403},
		{"no-cors, no Origin", "POST", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, 403},
		{"a GET stream from another site", "GET", h{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors", "Accept": "text/event-stream"}, 403},
		{"an image from another site", "GET", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}, 403},
		{"a script from another site", "GET", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"}, 403},
		{"a frame in another site", "GET", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}, 403},
		{"a HEAD from another site", "HEAD", h{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, 403},
		{"a GET from an old browser's page", "GET", h{"Origin": "http://evil.example"}, 403},
		{"another site's preflight", "OPTIONS", h{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST", "Sec-Fetch-Site": "cross-site"}, 403},
		{"a DELETE of a session from another site", "DELETE", h{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
	}
	for _, c := range cases {
		for _, path := range []string{"/rpc/x", "/mcp"} {
			before := g.reached.Load()
			resp, body := raw(t, addr, c.method, path, "127.0.0.1:"+port, c.header)
			reached := g.reached.Load() != before
			if resp.StatusCode != c.want {
				t.Errorf("%s, %s %s: %d %q; want %d", c.name, c.method, path, resp.StatusCode, body, c.want)
			}
			if c.want == http.StatusForbidden {
				if reached {
					t.Errorf("%s, %s %s reached the handler", c.name, c.method, path)
				}
				if c.method != http.MethodHead && !strings.Contains(body, "http_cors_origins") {
					t.Errorf("%s, %s %s: %q; want a body naming http_cors_origins", c.name, c.method, path, body)
				}
			}
		}
	}
	// "*" lets any page call.
	open := newGuarded(httpserve.Config{CORSOrigins: []string{"*"}})
	url, _ = serve(t, open.s)
	if resp, body := raw(t, strings.TrimPrefix(url, "http://"), "POST", "/rpc/x", "localhost", h{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusOK {
		t.Errorf(`http_cors_origins ["*"], another site: %d %q; want served`, resp.StatusCode, body)
	}
}

// TestCheckExposure: a port beyond loopback with authentication off is
// refused, naming the opt-in; loopback, authentication or the opt-in let
// it start.
func TestCheckExposure(t *testing.T) {
	t.Parallel()
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	for _, c := range []struct {
		name    string
		cfg     httpserve.Config
		addr    net.Addr
		authOn  bool
		refused bool
	}{
		{"0.0.0.0, no authentication", httpserve.Config{Listen: "0.0.0.0:8080"}, all, false, true},
		{"::, no authentication", httpserve.Config{Listen: ":8080"}, &net.TCPAddr{IP: net.IPv6zero, Port: 8080}, false, true},
		{"an interface's address", httpserve.Config{Listen: "192.0.2.2:8080"}, &net.TCPAddr{IP: net.ParseIP("192.0.2.2"), Port: 8080}, false, true},
		{"loopback", httpserve.Config{Listen: "127.0.0.1:8080"}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, false, false},
		{"IPv6 loopback", httpserve.Config{Listen: "[::1]:8080"}, &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, false, false},
		{"authentication on", httpserve.Config{Listen: "0.0.0.0:8080"}, all, true, false},
		{"the opt-in", httpserve.Config{Listen: "0.0.0.0:8080", AllowUnauthenticated: true}, all, false, false},
	} {
		err := c.cfg.CheckExposure(c.addr, c.authOn)
		if c.refused != (err != nil) || err != nil && !strings.Contains(err.Error(), "--http-allow-unauthenticated") {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// BenchmarkGuard measures a request through the port's handler (Host and
// Origin checks, the drain's count, the body limit) against the same
// route on a bare http.ServeMux, the baseline; a browser's same-origin
// request, the checks' longest path.
func BenchmarkGuard(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	bare := http.NewServeMux()
	bare.Handle("/rpc/", ok)
	port := httpserve.New(httpserve.Config{AllowedHosts: []string{"toolwire.example.com"}}, nil, nil)
	port.Handle("/rpc/", ok, nil)
	for name, h := range map[string]http.Handler{"bare mux": bare, "port": port.Handler()} {
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodPost, "http://toolwire.example.com:8080/rpc/x", nil)
			req.Header.Set("Origin", "http://toolwire.example.com:8080")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
			if w.Code != http.StatusNoContent {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		})
	}
}

// TestRefusalLogLineIsBounded: the debug line of a request the guard
// refuses quotes what the client sent (method, path, Host, Origin,
// Sec-Fetch-Site) cut to a bound, as the refusal's reason does; each could
// be as long as the header limit, 64 KiB, and was copied whole.
func TestRefusalLogLineIsBounded(t *testing.T) {
	t.Parallel()
	var logged logbuf.Buffer
	s := httpserve.New(httpserve.Config{}, nil, slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	s.Handle("/rpc/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("a refused request was served") }), nil)
	url, _ := serve(t, s)
	addr := strings.TrimPrefix(url, "http://")
	long := strings.Repeat("x", 12<<10) // five of them stay below the 64 KiB header limit
	resp, _ := raw(t, addr, "M"+long, "/rpc/"+long, "evil"+long+".example", map[string]string{"Origin": "http://" + long + ".example", "Sec-Fetch-Site": long})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d; want 403", resp.StatusCode)
	}
	var line string
	for l := range strings.SplitSeq(logged.String(), "\n") {
		if strings.Contains(l, "refused a request from a web page") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no refusal line in the log:\n%.1000s", logged.String())
	}
	if len(line) > 4096 {
		t.Errorf("the refusal's line is %d bytes; want at most 4096: %.600s…", len(line), line)
	}
	// And a page sending refusals as fast as it can writes 10 lines each
	// 10 s, not one per request.
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for range 100 {
		req, _ := http.NewRequest(http.MethodPost, url+"/rpc/x", nil)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d; want 403", resp.StatusCode)
		}
	}
	if n := strings.Count(logged.String(), "refused a request from a web page"); n > 10 {
		t.Errorf("101 refused requests logged %d lines; want at most 10", n)
	}
}
