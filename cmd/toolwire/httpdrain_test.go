package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/service/mcpserve"
)

// TestServeHTTPDrain: shutting down with a call in flight on the HTTP
// port, the port goes on answering until that call ends: /healthz says
// 503, new requests get 503 unavailable in their protocol (a Connect
// error, a JSON-RPC error on /mcp, grpc-status 14 to a gRPC client),
// rather than a refused connection; once the call ends, the port closes
// and serve returns nil.
func TestServeHTTPDrain(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0")
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	jsonCT := map[string]string{"Content-Type": "application/json"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	inFlight := make(chan string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/toolwire.v1.ToolService/CallTool",
			strings.NewReader(`{"call":{"callId":"drain-1","name":"sleep","arguments":"{\"ms\":600000}"}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inFlight <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		inFlight <- string(b)
	}()
	waitFor(t, "the sleep in flight", func() bool {
		_, body := send(t, "POST", addr, "/toolwire.v1.AdminService/GetServerStatus", "{}", jsonCT)
		return strings.Contains(body, "drain-1")
	})

	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	waitFor(t, "/healthz 503", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz while a call is in flight during the drain: %v; want an answer", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable && string(b) == "draining\n"
	})
	resp, body := send(t, "POST", addr, "/toolwire.v1.ToolService/CallTool", curlBody, jsonCT)
	var e struct{ Code, Message string }
	_ = json.Unmarshal([]byte(body), &e)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "unavailable" {
		t.Errorf("a new Connect call while draining: %d %s; want 503 unavailable", resp.StatusCode, body)
	}
	resp, body = send(t, "POST", addr, "/mcp", `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}`,
		map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	var rpc struct {
		ID    int
		Error struct{ Code int64 }
	}
	_ = json.Unmarshal([]byte(body), &rpc)
	if rpc.ID != 3 || rpc.Error.Code != mcpserve.CodeUnavailable {
		t.Errorf("a new MCP request while draining: %d %s; want a JSON-RPC error to ID 3, code %d", resp.StatusCode, body, mcpserve.CodeUnavailable)
	}
	if got := runCmd(t, addr, "call", "--no-progress", "echo", `{"text":"late"}`); got.code == 0 || !strings.Contains(fmt.Sprint(got.err), "draining") {
		t.Errorf("a gRPC call to the HTTP port while draining: %+v; want it refused as draining", got)
	}
	select {
	case err := <-stopped:
		t.Fatalf("serve returned (%v) with a call in flight on the HTTP port", err)
	default:
	}

	cancel() // the client gives up its call, which ends the last request
	<-inFlight
	if err := <-stopped; err != nil {
		t.Errorf("serve after the drain: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("the HTTP port still answers after the drain")
	}
}

// curlBody is the README's CallTool of echo in Connect's JSON.
const curlBody = `{"call":{"callId":"1","name":"echo","arguments":"{\"text\":\"hi\"}"}}`

// TestServeChunkedBodyLimit: a request body of no declared length past
// http_max_body_bytes is refused as too large on every route, in its
// protocol: 413 and a Connect error (not Connect's 429, which invites a
// retry), 413 and a JSON-RPC error on /mcp, RESOURCE_EXHAUSTED naming the
// setting to gRPC-Web, gRPC and Connect streams (whose protocols carry the
// error after a 200).
func TestServeChunkedBodyLimit(t *testing.T) {
	t.Parallel()
	config := writeFile(t, "toolwire.yaml", "http_max_body_bytes: 65536\n")
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--config", config)
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	big := `{"call":{"callId":"1","name":"echo","arguments":"{\"text\":\"` + strings.Repeat("x", 100<<10) + `\"}"}}`
	chunked := func(path, contentType, body string, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, io.MultiReader(strings.NewReader(body))) // no length: chunked
		req.Header.Set("Content-Type", contentType)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := chunked("/toolwire.v1.ToolService/CallTool", "application/json", big, nil)
	var e struct{ Code, Message string }
	_ = json.Unmarshal([]byte(body), &e)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Code != "resource_exhausted" || !strings.Contains(e.Message, "http_max_body_bytes") {
		t.Errorf("Connect: %d %s; want 413 resource_exhausted naming http_max_body_bytes", resp.StatusCode, body)
	}
	mcpBig := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 100<<10) + `"}}}`
	resp, body = chunked("/mcp", "application/json", mcpBig, map[string]string{"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": mcpserve.RevisionStateless})
	var rpc struct {
		Error struct {
			Code    int64
			Message string
		}
	}
	_ = json.Unmarshal([]byte(body), &rpc)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || rpc.Error.Code != mcpserve.CodeResourceExhausted || !strings.Contains(rpc.Error.Message, "http_max_body_bytes") {
		t.Errorf("/mcp: %d %.300s; want 413 and a JSON-RPC error %d naming http_max_body_bytes", resp.StatusCode, body, mcpserve.CodeResourceExhausted)
	}
	frame := func(msg string) string {
		var b bytes.Buffer
		b.WriteByte(0)
		_ = binary.Write(&b, binary.BigEndian, uint32(len(msg)))
		b.WriteString(msg)
		return b.String()
	}
	resp, _ = chunked("/toolwire.v1.ToolService/CallTool", "application/grpc-web+json", frame(big), nil)
	if resp.Header.Get("Grpc-Status") != "8" || !strings.Contains(resp.Header.Get("Grpc-Message"), "http_max_body_bytes") {
		t.Errorf("gRPC-Web: %d %v; want grpc-status 8 naming http_max_body_bytes", resp.StatusCode, resp.Header)
	}
	resp, body = chunked("/toolwire.v1.ToolService/ExecuteBatch", "application/connect+json", frame(`{"calls":[`+strings.TrimSuffix(strings.TrimPrefix(big, `{"call":`), "}")+`]}`), nil)
	if !strings.Contains(body, `"code":"resource_exhausted"`) || !strings.Contains(body, "http_max_body_bytes") {
		t.Errorf("a Connect stream: %d %.300q; want its end message resource_exhausted naming http_max_body_bytes", resp.StatusCode, body)
	}
	// grpc-go sends no content-length either.
	if got := runCmd(t, addr, "call", "--no-progress", "echo", `{"text":"`+strings.Repeat("x", 100<<10)+`"}`); got.code == 0 || !strings.Contains(fmt.Sprint(got.err), "http_max_body_bytes") {
		t.Errorf("gRPC over h2c: %+v; want it refused naming http_max_body_bytes", got)
	}
	// Under the limit, chunked bodies are served.
	if resp, body := chunked("/toolwire.v1.ToolService/CallTool", "application/json", curlBody, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"hi"`) {
		t.Errorf("a small chunked call: %d %s", resp.StatusCode, body)
	}
}
