package httpsource

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSender runs the request layer as sources/openapi uses it: header
// parameters from the arguments beside secret headers from the
// environment, a JSON body, structured content from a JSON response, a
// 204 without a body, and the refusals.
func TestSender(t *testing.T) {
	type seen struct {
		method, uri, trace, auth, ctype, body string
	}
	got := make(chan seen, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Header.Get("X-Trace"), r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)}
		switch r.URL.Path {
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		case "/text":
			io.WriteString(w, "not json")
		case "/fail":
			http.Error(w, "no such pet", http.StatusNotFound)
		default:
			io.WriteString(w, `{"id":7}`)
		}
	}))
	defer up.Close()
	t.Setenv("TW_SENDER_TOKEN", "s3cret")
	hdrs, err := ParseHeaders(map[string]string{"Authorization": "Bearer {{TW_SENDER_TOKEN}}"})
	if err != nil {
		t.Fatal(err)
	}
	s := &Sender{Client: NewClient(), Headers: hdrs}
	defer s.Client.CloseIdleConnections()

	resp, res, err := s.Send(t.Context(), Request{Method: "POST", URL: up.URL + "/pets/" + PathEscape("a/b"), Header: http.Header{"X-Trace": {"t1"}}, Body: []byte(`{"name":"rex"}`)})
	if err != nil || res != nil {
		t.Fatalf("Send: %v, %v", res, err)
	}
	if r := <-got; r != (seen{"POST", "/pets/a%2Fb", "t1", "Bearer s3cret", "application/json", `{"name":"rex"}`}) {
		t.Errorf("the server saw %+v", r)
	}
	res = resp.Structured(true)
	if res.IsError || string(res.StructuredContent) != `{"id":7}` {
		t.Errorf("Structured: %+v", res)
	}
	var det details
	if err := json.Unmarshal(res.Details, &det); err != nil || det.Status != 200 || det.Method != "POST" || strings.Contains(string(res.Details), "s3cret") {
		t.Errorf("details %s (%v)", res.Details, err)
	}

	resp, _, _ = s.Send(t.Context(), Request{Method: "DELETE", URL: up.URL + "/none"})
	<-got
	if res := resp.Structured(true); res.IsError || res.StructuredContent != nil || res.Content[0].Text != "HTTP 204 No Content" {
		t.Errorf("204: %+v", res)
	}
	resp, _, _ = s.Send(t.Context(), Request{Method: "GET", URL: up.URL + "/text"})
	<-got
	// A 2xx answer is the upstream's answer even when it cannot be
	// structured content: its text, with the reason in its details.
	if res := resp.Structured(true); res.IsError || res.Content[0].Text != "not json" || res.StructuredContent != nil ||
		!strings.Contains(string(res.Details), `"status":200`) || !strings.Contains(string(res.Details), `"unstructured":"the response is not JSON"`) {
		t.Errorf("a text body with an output schema: %+v (details %s)", res, res.Details)
	}
	if res := resp.Structured(false); res.IsError || res.Content[0].Text != "not json" {
		t.Errorf("a text body without an output schema: %+v", res)
	}
	_, res, _ = s.Send(t.Context(), Request{Method: "GET", URL: up.URL + "/fail"})
	<-got
	if res == nil || !res.IsError || !strings.Contains(res.Content[0].Text, "HTTP 404 Not Found: no such pet") || !strings.Contains(string(res.Details), `"status":404`) {
		t.Errorf("404: %+v", res)
	}
	// A body in another media type carries it.
	if _, res, _ = s.Send(t.Context(), Request{Method: "POST", URL: up.URL + "/form", Body: []byte("a=1&b%5Bc%5D=2"), ContentType: "application/x-www-form-urlencoded"}); res != nil {
		t.Fatalf("a form body: %+v", res)
	}
	if r := <-got; r.ctype != "application/x-www-form-urlencoded" || r.body != "a=1&b%5Bc%5D=2" {
		t.Errorf("a form body: the server saw %+v", r)
	}
	_, res, _ = s.Send(t.Context(), Request{Method: "GET", URL: up.URL + "/", Header: http.Header{"X-Trace": {"a\r\nInjected: 1"}}})
	if res == nil || !res.IsError || !strings.Contains(res.Content[0].Text, "line break") {
		t.Errorf("a header parameter with a line break: %+v", res)
	}
	select {
	case r := <-got:
		t.Errorf("a request with a line break in a header was sent: %+v", r)
	default:
	}
}
