package httpsource_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/tools"
)

// TestRedirectToPlainHTTPDropsSecrets follows redirects from
// https://api.test: one to another path over HTTPS keeps the tool's
// secret header, one to the same host over plain HTTP drops it, as one
// to another host does (e2e_test.go): Go's client keeps custom headers on
// a downgrade, and the secret would cross the network in the clear.
func TestRedirectToPlainHTTPDropsSecrets(t *testing.T) {
	t.Setenv("TW_REDIRECT_KEY", "downgrade-secret")
	var mu sync.Mutex
	saw := map[string]string{}
	note := func(scheme string, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		saw[scheme+" "+r.URL.Path] = r.Header.Get("X-Api-Key")
	}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note("http", r)
		_, _ = w.Write([]byte(`"landed"`))
	}))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note("https", r)
		switch r.URL.Path {
		case "/start":
			http.Redirect(w, r, "https://api.test/again", http.StatusFound)
		case "/again":
			http.Redirect(w, r, "http://api.test/landing", http.StatusFound)
		}
	}))
	defer secure.Close()

	hc := httpsource.NewClient()
	tr := hc.Transport.(*http.Transport)
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate())
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: "example.com"} // httptest's certificate's name
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		switch addr {
		case "api.test:443":
			addr = secure.Listener.Addr().String()
		case "api.test:80":
			addr = plain.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	ts, err := httpsource.Tools([]httpsource.Spec{{Name: "t", URL: "https://api.test/start", Headers: map[string]string{"X-Api-Key": "{{TW_REDIRECT_KEY}}"}, ReadOnly: true}}, hc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ts[0].Handler(context.Background(), tools.NewCall("1", "t", json.RawMessage(`{}`), nil))
	if err != nil || res.IsError {
		t.Fatalf("the call: %v, %+v", err, res)
	}
	want := map[string]string{"https /start": "downgrade-secret", "https /again": "downgrade-secret", "http /landing": ""}
	if diff := cmp.Diff(want, saw); diff != "" {
		t.Errorf("the secret header each hop received (-want +got):\n%s", diff)
	}
}

// TestRedirectToInternalAddressRefused has an upstream with an open
// redirect (as many APIs have: /login?next=, /r?url=), which a model's
// arguments reach, send the tool's request to an internal service: one on
// loopback by name, by address and by IPv6 address, and the cloud
// metadata address. Each redirect was followed, and the internal answer
// came back to the model as the tool's result (the secret header was
// dropped, the answer was not). Now each is an error result naming where
// it led, and the internal service sees no request; a redirect within the
// tool's own host is still followed, with its secrets.
func TestRedirectToInternalAddressRefused(t *testing.T) {
	t.Setenv("TW_REDIRECT_INTERNAL_KEY", "open-redirect-secret")
	var mu sync.Mutex
	var internalSaw []string
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		internalSaw = append(internalSaw, r.URL.Path)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"AccessKeyId":"ASIA-internal","SecretAccessKey":"internal-only"}`))
	}))
	defer internal.Close()
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/r":
			http.Redirect(w, r, r.URL.Query().Get("url"), http.StatusFound)
		case "/me":
			_, _ = w.Write([]byte(`{"key":"` + r.Header.Get("X-Api-Key") + `"}`))
		}
	}))
	defer upstream.Close()
	hc := httpsource.NewClient()
	defer hc.CloseIdleConnections()
	ts, err := httpsource.Tools([]httpsource.Spec{{
		Name: "follow", URL: upstream.URL + "/r", ReadOnly: true,
		Headers:    map[string]string{"X-Api-Key": "{{TW_REDIRECT_INTERNAL_KEY}}"},
		Parameters: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string"}}}`),
	}}, hc)
	if err != nil {
		t.Fatal(err)
	}
	run := func(to string) *tools.Result {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"url": to})
		res, err := ts[0].Handler(t.Context(), tools.NewCall("1", "follow", args, nil))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, tt := range []struct{ to, want string }{
		{"http://localhost:" + port + "/latest/meta-data", "refused a redirect to http://localhost:" + port + "/latest/meta-data: localhost: "},
		{internal.URL + "/latest/meta-data", "127.0.0.1 is a loopback address"},
		{"http://[::ffff:127.0.0.1]:" + port + "/x", "127.0.0.1 is a loopback address"},
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "169.254.169.254 is a link-local address"},
		{"http://10.0.0.1/", "10.0.0.1 is a private address"},
		{"http://100.100.100.200/latest/meta-data", "100.100.100.200 is a private address"},
		{"http://[fd00:ec2::254]/latest/meta-data", "fd00:ec2::254 is a private address"},
		{"http://0.0.0.0:" + port + "/", "0.0.0.0 is not a public unicast address"},
	} {
		res := run(tt.to)
		got := ""
		for _, c := range res.Content {
			got += c.Text
		}
		if !res.IsError || !strings.Contains(got, tt.want) || strings.Contains(got, "internal-only") {
			t.Errorf("redirect to %s: error %v %q; want an error with %q", tt.to, res.IsError, got, tt.want)
		}
	}
	mu.Lock()
	if len(internalSaw) > 0 {
		t.Errorf("the internal service was reached at %q", internalSaw)
	}
	mu.Unlock()
	if res := run("/me"); res.IsError || res.Content[0].Text != `{"key":"open-redirect-secret"}` {
		t.Errorf("a redirect within the tool's host: %+v; want it followed with the secret", res)
	}
}
