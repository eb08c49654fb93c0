package httpserve_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/service/httpserve"
)

// TestHealthzAndDrain: while a request is in flight, a drain keeps the
// port answering: /healthz says 503, a new request gets 503 unavailable in
// its route's protocol (a Connect error, grpc-status 14, the route's own
// refusal), and the request in flight finishes; once it has, the port
// closes and Serve returns nil.
func TestHealthzAndDrain(t *testing.T) {
	s := httpserve.New(httpserve.Config{DrainTimeout: time.Minute}, nil, nil)
	release := make(chan struct{})
	started := make(chan struct{})
	s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "finished")
	}), nil)
	s.Handle("POST /rpc", echo(), nil)
	s.Handle("POST /mcp", echo(), func(w http.ResponseWriter, r *http.Request, status int, code, message string) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "mcp "+code)
	})
	url, stop := serve(t, s)
	get := func(path string) (int, string, error) {
		resp, err := http.Get(url + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if status, body, err := get("/healthz"); err != nil || status != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q %v", status, body, err)
	}
	slow := make(chan string, 1)
	go func() {
		_, body, err := get("/slow")
		if err != nil {
			body = err.Error()
		}
		slow <- body
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The drain begins once Serve sees its context done.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, body, err := get("/healthz")
		if err != nil {
			t.Fatalf("/healthz while draining with a request in flight: %v; want an answer", err)
		}
		if status == http.StatusServiceUnavailable && body == "draining\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz while draining: %d %q; want 503 draining", status, body)
		}
	}
	resp, err := http.Post(url+"/rpc", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("a new Connect request while draining: %v; want an answer", err)
	}
	var e struct{ Code, Message string }
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "unavailable" || !strings.Contains(e.Message, "draining") {
		t.Errorf("a new Connect request while draining: %d %+v; want 503 unavailable", resp.StatusCode, e)
	}
	resp, err = http.Post(url+"/rpc", "application/grpc-web+proto", strings.NewReader("\x00\x00\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Grpc-Status") != "14" {
		t.Errorf("a new gRPC-Web request while draining: %d %v; want grpc-status 14 (UNAVAILABLE)", resp.StatusCode, resp.Header)
	}
	resp, err = http.Post(url+"/mcp", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || string(b) != "mcp unavailable" {
		t.Errorf("a new request of a route with its own refusals while draining: %d %q", resp.StatusCode, b)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if got := <-slow; got != "finished" {
		t.Errorf("the request in flight during the drain: %q; want it finished", got)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve after a drain: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
	if _, _, err := get("/healthz"); err == nil {
		t.Error("the port still answers after the drain")
	}
}

// TestDrainTimeout: a request still running at DrainTimeout has its
// connection closed, and Serve returns.
func TestDrainTimeout(t *testing.T) {
	s := httpserve.New(httpserve.Config{DrainTimeout: 100 * time.Millisecond}, nil, nil)
	started := make(chan struct{})
	s.Handle("GET /stuck", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // the connection's close ends it
	}), nil)
	url, stop := serve(t, s)
	stuck := make(chan error, 1)
	go func() {
		resp, err := http.Get(url + "/stuck")
		if err == nil {
			resp.Body.Close()
		}
		stuck <- err
	}()
	<-started
	if err := stop(); err != nil {
		t.Errorf("Serve after a drain that timed out: %v", err)
	}
	if err := <-stuck; err == nil {
		t.Error("the stuck request got a response; want its connection closed")
	}
}
