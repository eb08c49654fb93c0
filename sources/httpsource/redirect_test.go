package httpsource_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
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
