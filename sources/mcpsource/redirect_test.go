package mcpsource

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

// TestRedirectToAnotherOrigin: an MCP server whose URL answers 307 to
// another server does not hand that server the configured headers (which
// the session adds to every round trip): the redirect is refused, and
// says where it led.
func TestRedirectToAnotherOrigin(t *testing.T) {
	t.Setenv("MCPGW_TEST_REDIRECT_TOKEN", "tok-redirect-1")
	other := newHTTPServer(t, testserver.Hooks{}) // another port: another origin
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	g, reg := newGateway(t)
	logs := &logbuf.Buffer{}
	g.log = slog.New(slog.NewTextHandler(logs, nil))
	err := g.Sync(context.Background(), []ServerConfig{{Name: "web", URL: front.URL + "/mcp", Headers: map[string]string{
		"Authorization": "Bearer {{MCPGW_TEST_REDIRECT_TOKEN}}", "X-Api-Key": "{{MCPGW_TEST_REDIRECT_TOKEN}}"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Either the refusal is logged or the other server is reached.
	for limit := time.Now().Add(waitLimit); ; time.Sleep(5 * time.Millisecond) {
		other.mu.Lock()
		reached := len(other.requests) > 0
		other.mu.Unlock()
		if reached || strings.Contains(logs.String(), "refused a redirect") {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("neither a refused redirect nor a request to the other server:\n%s", logs)
		}
	}
	other.mu.Lock()
	for _, a := range other.auth {
		if strings.Contains(a, "tok-redirect-1") {
			t.Errorf("the server redirected to got Authorization %q", a)
		}
	}
	if n := len(other.requests); n > 0 {
		t.Errorf("the server redirected to got %d requests", n)
	}
	other.mu.Unlock()
	want := "refused a redirect to " + other.URL + "/mcp"
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, logs)
	}
	if strings.Contains(logs.String(), "tok-redirect-1") {
		t.Errorf("the secret is in the log:\n%s", logs)
	}
	if names := reg.Snapshot().Names(); len(names) > 0 {
		t.Errorf("tools through a refused redirect: %v", names)
	}
}

// TestRedirectWithinOrigin: a redirect within the server's origin (a
// framework's /mcp → /mcp/) is followed, with the headers.
func TestRedirectWithinOrigin(t *testing.T) {
	t.Setenv("MCPGW_TEST_REDIRECT_TOKEN", "tok-redirect-2")
	var mu sync.Mutex
	var auth []string // of requests to /mcp/
	srv := testserver.New(testserver.Hooks{})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/mcp/", http.StatusTemporaryRedirect)
	})
	mux.Handle("/mcp/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	web := httptest.NewServer(mux)
	t.Cleanup(func() {
		for ss := range srv.Sessions() {
			ss.Close()
		}
		web.Close()
	})
	g, reg := newGateway(t)
	err := g.Sync(context.Background(), []ServerConfig{{Name: "web", URL: web.URL + "/mcp", Headers: map[string]string{
		"Authorization": "Bearer {{MCPGW_TEST_REDIRECT_TOKEN}}"}}})
	if err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has(prefixed("web", testTools...)...))
	if r := call(t, context.Background(), snap, "web_read", `{"text":"moved"}`, nil); r.IsError || !strings.Contains(text(r), "moved") {
		t.Errorf("read: %q", text(r))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 {
		t.Fatal("no request reached /mcp/")
	}
	for _, a := range auth {
		if a != "Bearer tok-redirect-2" {
			t.Errorf("request to /mcp/ with Authorization %q", a)
		}
	}
}

func TestSameOriginRedirect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, from, to string
		hops           int
		refused        bool
	}{
		{"same origin", "https://mcp.example/mcp", "https://mcp.example/mcp/", 1, false},
		{"default port written out", "https://mcp.example/mcp", "https://MCP.example:443/v2", 1, false},
		{"another host", "https://mcp.example/mcp", "https://evil.example/mcp", 1, true},
		{"a subdomain", "https://example.com/mcp", "https://mcp.example.com/mcp", 1, true},
		{"another port", "http://127.0.0.1:8080/mcp", "http://127.0.0.1:8081/mcp", 1, true},
		{"to plain http", "https://mcp.example/mcp", "http://mcp.example/mcp", 1, true},
		{"too many", "https://mcp.example/a", "https://mcp.example/d", maxRedirects, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var via []*http.Request
			for range tc.hops {
				via = append(via, &http.Request{URL: mustURL(t, tc.from)})
			}
			err := sameOriginRedirect(&http.Request{URL: mustURL(t, tc.to)}, via)
			if (err != nil) != tc.refused {
				t.Errorf("sameOriginRedirect(%s → %s) = %v; want refused %v", tc.from, tc.to, err, tc.refused)
			}
			if err != nil && tc.hops == 1 && !errors.Is(err, errRedirect) {
				t.Errorf("error %v does not wrap errRedirect", err)
			}
		})
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
