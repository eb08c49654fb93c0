package auth_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testpki"
)

var discard = slog.New(slog.DiscardHandler)

func noEnv(string) string { return "" }

// whoami answers with the caller the middleware put into the context.
func whoami(calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, "caller=", engine.CallerFrom(r.Context()))
	})
}

func TestRequireCredentials(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "toolwire test CA"), testpki.New(t, "some other CA")
	certFile, keyFile := testpki.WritePEM(t, t.TempDir(), "server", ca.Issue(t, testpki.Server))
	v := mustNew(t, auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}, ClientCAs: ca.Pool(), CertificateCallerPrefix: "cert:"})
	tlsCfg, err := auth.ServerTLS(certFile, keyFile, v)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	// The server's own TLS configuration, not httptest's certificate.
	srv := httptest.NewUnstartedServer(auth.RequireCredentials(v, discard)(whoami(&calls)))
	srv.Listener = tls.NewListener(srv.Listener, tlsCfg)
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError) // refused handshakes
	srv.Start()
	t.Cleanup(srv.Close)
	url := "https://" + srv.Listener.Addr().String()

	type answer struct {
		Status          int
		WWWAuthenticate string
		ContentType     string
		Body            string // or, as JSON,
		Code, Message   string
	}
	refused := func(reason string) answer {
		return answer{Status: http.StatusUnauthorized, WWWAuthenticate: "Bearer", ContentType: "application/json", Code: "unauthenticated", Message: reason}
	}
	ok := func(caller string) answer {
		return answer{Status: http.StatusOK, ContentType: "text/plain; charset=utf-8", Body: "caller=" + caller}
	}
	for _, tc := range []struct {
		name          string
		cert          *tls.Certificate
		authorization []string
		want          answer
	}{
		{name: "token", authorization: []string{"Bearer " + aliceToken}, want: ok("alice")},
		{name: "certificate", cert: ptr(ca.Issue(t, testpki.Client("agent-7"))), want: ok("cert:agent-7")},
		{name: "missing", want: refused(`missing credentials: send an "authorization: Bearer <token>" header or a client certificate`)},
		{name: "invalid token", authorization: []string{"Bearer not-a-token-of-ours-at-all"}, want: refused("invalid bearer token")},
		{name: "two headers", authorization: []string{"Bearer " + aliceToken, "Bearer " + aliceToken}, want: refused("2 authorization headers: send exactly one")},
		{name: "wrong token beats a valid certificate", cert: ptr(ca.Issue(t, testpki.Client("agent-7"))), authorization: []string{"Bearer nope-nope-nope-nope-nope"}, want: refused("invalid bearer token")},
		{name: "certificate of another CA", cert: ptr(other.Issue(t, testpki.Client("agent-7"))), want: refused("client certificate rejected: x509: certificate signed by unknown authority")},
		{name: "expired certificate", cert: ptr(ca.Issue(t, testpki.Client("agent-7", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		}))), want: answer{Status: http.StatusUnauthorized}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := httpClient(ca, tc.cert)
			req, _ := http.NewRequest(http.MethodGet, url+"/whoami", nil)
			for _, a := range tc.authorization {
				req.Header.Add("Authorization", a)
			}
			before := calls.Load()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			got := answer{Status: resp.StatusCode, WWWAuthenticate: resp.Header.Get("WWW-Authenticate"), ContentType: resp.Header.Get("Content-Type"), Body: string(body)}
			if got.ContentType == "application/json" {
				var e struct{ Code, Message string }
				if err := json.Unmarshal(body, &e); err != nil {
					t.Errorf("body %s: %v", body, err)
				}
				got.Body, got.Code, got.Message = "", e.Code, e.Message
			}
			if tc.want == (answer{Status: http.StatusUnauthorized}) {
				got = answer{Status: got.Status} // the reason is x509's, with the time in it
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if reached := calls.Load() != before; reached != (tc.want.Status == http.StatusOK) {
				t.Errorf("the handler was reached: %v; want %v", reached, !reached)
			}
		})
	}
}

func TestRequireCredentialsOffIsTheAnonymousCaller(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(auth.RequireCredentials(mustNew(t, auth.Config{}), discard)(whoami(&calls)))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Authorization", "Bearer anything-at-all-really")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "caller=" {
		t.Errorf("%d %q; want 200 and the anonymous caller", resp.StatusCode, body)
	}
}

func ptr[T any](v T) *T { return &v }

// httpClient trusts ca and presents cert, when given.
func httpClient(ca *testpki.CA, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

// TestRequireCredentialsLogsABoundedLine: the line logged for a refused
// request quotes its method and path cut to a bound, as it does the
// reason. A 60 KB path made a 60 KB line for every unauthenticated request.
func TestRequireCredentialsLogsABoundedLine(t *testing.T) {
	t.Parallel()
	var logged logbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	v := mustNew(t, auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	var calls atomic.Int32
	srv := httptest.NewServer(auth.RequireCredentials(v, log)(whoami(&calls)))
	t.Cleanup(srv.Close)

	long := strings.Repeat("p", 60<<10)
	for _, tc := range []struct{ name, method, path string }{
		{"long path", http.MethodPost, "/toolwire.v1.ToolService/" + long},
		{"long method", "M" + strings.Repeat("E", 60<<10), "/mcp"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: status %d; want 401", tc.name, resp.StatusCode)
		}
	}
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines logged; want 2:\n%.500s", len(lines), logged.String())
	}
	for _, line := range lines {
		var l struct{ Msg, Method, Path string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %.200q: %v", line, err)
		}
		if len(line) > 2048 || l.Msg != "unauthenticated request refused" || !strings.Contains(l.Method+l.Path, "bytes)") {
			t.Errorf("a line of %d bytes (want at most 2048, the long field cut and marked): %.300s…", len(line), line)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("the handler was reached %d times", calls.Load())
	}
}

// TestRefusalLinesAreLimited: a client refused as fast as it sends gets at
// most 10 lines logged every 10 s, not one per request; the requests are
// refused all the same.
func TestRefusalLinesAreLimited(t *testing.T) {
	t.Parallel()
	var logged logbuf.Buffer
	v := mustNew(t, auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	var calls atomic.Int32
	srv := httptest.NewServer(auth.RequireCredentials(v, slog.New(slog.NewJSONHandler(&logged, nil)))(whoami(&calls)))
	t.Cleanup(srv.Close)
	for i := range 200 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d: status %d; want 401", i, resp.StatusCode)
		}
	}
	if n := strings.Count(logged.String(), "unauthenticated request refused"); n != 10 {
		t.Errorf("%d lines logged for 200 refused requests; want 10", n)
	}
	if calls.Load() != 0 {
		t.Errorf("the handler was reached %d times", calls.Load())
	}
}
