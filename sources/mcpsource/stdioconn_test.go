package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
)

// pipeConn returns a stdioConn reading what the test writes to w, and
// what it logs.
func pipeConn(t *testing.T) (*stdioConn, *os.File, *logbuf.Buffer) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	logs := &logbuf.Buffer{}
	return newStdioConn(&process{stdout: r}, slog.New(slog.NewTextHandler(logs, nil)), time.Second), w, logs
}

// TestStdioConnReadsWhatTheSDKReads: each message a server may send, as
// one line, with CRLF, pretty-printed over lines, in a batch, and last
// without a newline, reads as jsonrpc.DecodeMessage decodes it.
func TestStdioConnReadsWhatTheSDKReads(t *testing.T) {
	id7, _ := jsonrpc.MakeID(float64(7))
	idS, _ := jsonrpc.MakeID("a-1")
	msgs := []jsonrpc.Message{
		&jsonrpc.Request{ID: id7, Method: "tools/list", Params: json.RawMessage(`{"cursor":"x"}`)},
		&jsonrpc.Request{Method: "notifications/progress", Params: json.RawMessage(`{"progressToken":"t","progress":1,"total":4,"message":"é\u2028"}`)},
		&jsonrpc.Request{ID: idS, Method: ""},
		&jsonrpc.Response{ID: id7, Result: json.RawMessage(`{"content":[{"type":"text","text":"hi\n"}],"structuredContent":{"a":[1,2.5e3,null]}}`)},
		&jsonrpc.Response{ID: idS, Error: &jsonrpc.Error{Code: -32602, Message: "bad", Data: json.RawMessage(`{"why":"x"}`)}},
	}
	var lines []string
	for _, m := range msgs {
		data, err := jsonrpc.EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(data))
	}
	pretty, _ := json.MarshalIndent(json.RawMessage(lines[3]), "", "  ")
	stream := lines[0] + "\n" + lines[1] + "\r\n" + "\n  \n" + string(pretty) + "\n" +
		"[" + lines[2] + "," + lines[4] + "]\n" + lines[0]
	want := []string{lines[0], lines[1], string(pretty), lines[2], lines[4], lines[0]}

	c, w, _ := pipeConn(t)
	go func() { io.WriteString(w, stream); w.Close() }()
	for i, text := range want {
		got, err := c.Read(context.Background())
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		exp, err := jsonrpc.DecodeMessage([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("message %d: %#v; want %#v", i, got, exp)
		}
	}
	if _, err := c.Read(context.Background()); err != io.EOF {
		t.Errorf("after the last message: %v; want EOF", err)
	}
}

// TestStdioConnSkips: a line that is no JSON-RPC message is logged and
// skipped, as the official TypeScript and Python clients skip it (the
// SDK's connection ended the session on it), and the messages around it
// are read; a line past the bound ends the reading, saying so.
func TestStdioConnSkips(t *testing.T) {
	const msg = `{"jsonrpc":"2.0","id":1,"result":{}}`
	for _, tc := range []struct{ name, junk, logged string }{
		{"a log line", "Starting the server on stdio...", "invalid character 'S'"},
		{"two on a line", `{"jsonrpc":"2.0","method":"a"} {"jsonrpc":"2.0","method":"b"}`, "after top-level value"},
		{"no version", `{"method":"a"}`, "version"},
		{"a response without an ID", `{"jsonrpc":"2.0","result":{}}`, "without an ID"},
		{"an ID of another type", `{"jsonrpc":"2.0","id":{},"result":{}}`, "invalid ID"},
		{"an empty batch", "[]", "empty batch"},
		{"a brace that begins nothing", "{", "not a JSON value"},
		{"a bracket", "[ERROR] it broke", "invalid character"},
		// A line that opens a value the next line could go on (a message
		// pretty-printed over lines starts so) does not take that line
		// with it when it is a message alone: read together, "[" and the
		// response were kept as a batch begun, then skipped with the
		// line after them, and the response was lost.
		{"a bracket alone", "[", "not a JSON value"},
		{"an object cut short", `{"level":"info","fields":[`, "not a JSON value"},
		{"a value over lines that is no message", "{\n  \"config\": [1,\n 2]\n}", "version"},
		{"a value over lines, then more", "{\n  \"jsonrpc\": \"2.0\", \"method\": \"a\"\n} and more", "not a JSON value"},
		{"a line a value cannot go on with", "[\nStarting the server...", "invalid character 'S'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, w, logs := pipeConn(t)
			go func() { io.WriteString(w, msg+"\n"+tc.junk+"\n"+msg+"\n"); w.Close() }()
			for i := range 2 {
				got, err := c.Read(context.Background())
				if r, ok := got.(*jsonrpc.Response); err != nil || !ok || r.ID.Raw() != int64(1) {
					t.Fatalf("message %d: %#v, %v; want the response", i, got, err)
				}
			}
			if _, err := c.Read(context.Background()); err != io.EOF {
				t.Errorf("after the last message: %v; want EOF", err)
			}
			first, _, _ := strings.Cut(tc.junk, "\n")
			// The line logged is the junk's first, as the server wrote it.
			if !strings.Contains(logs.String(), "not JSON-RPC; skipped") || !strings.Contains(logs.String(), tc.logged) || !strings.Contains(logs.String(), "line="+first) && !strings.Contains(logs.String(), "line="+strings.TrimSuffix(strconv.Quote(first), `"`)) {
				t.Errorf("the log does not say the line was skipped, and %q:\n%s", tc.logged, logs)
			}
			if err := c.lostCause(); err != nil {
				t.Errorf("lostCause: %v; want none", err)
			}
		})
	}
	t.Run("too long", func(t *testing.T) {
		c, w, _ := pipeConn(t)
		go func() {
			io.WriteString(w, `{"jsonrpc":"2.0","method":"`+strings.Repeat("x", maxResponseBody)+`"}`+"\n")
			w.Close()
		}()
		if _, err := c.Read(context.Background()); !errors.Is(err, errResponseTooLarge) {
			t.Errorf("Read: %v; want %v", err, errResponseTooLarge)
		}
		if err := c.lostCause(); !errors.Is(err, errResponseTooLarge) {
			t.Errorf("lostCause: %v; want %v", err, errResponseTooLarge)
		}
	})
	t.Run("too long over lines", func(t *testing.T) {
		c, w, _ := pipeConn(t)
		go func() {
			io.WriteString(w, "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":[\n")
			for line := strings.Repeat("1,", 1<<15) + "\n"; ; {
				if _, err := io.WriteString(w, line); err != nil {
					return // the reader gave up
				}
			}
		}()
		if _, err := c.Read(context.Background()); !errors.Is(err, errResponseTooLarge) {
			t.Errorf("Read: %v; want %v", err, errResponseTooLarge)
		}
	})
}

// TestProgressFloodCost: a server's progress notifications are read,
// decoded once and handed to their calls without the SDK: a few hundred
// bytes allocated each, where the SDK's connection and its handler took
// tens of KiB each (6.7 s of CPU for 100,000 of them; 0.7 s now).
func TestProgressFloodCost(t *testing.T) {
	const n = 2000
	c, w, _ := pipeConn(t)
	s := &server{calls: map[string]*forwarder{}}
	var buf strings.Builder
	for i := range n {
		fmt.Fprintf(&buf, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"gone","progress":%d}}`+"\n", i)
	}
	buf.WriteString(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n")
	stream := buf.String()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	go io.WriteString(w, stream)
	msg, err := (wireConn{Connection: c, s: s, rpc: new(atomic.Pointer[rpc])}).Read(context.Background())
	runtime.ReadMemStats(&ms1)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := msg.(*jsonrpc.Response); !ok || r.ID.Raw() != int64(1) {
		t.Fatalf("Read: %#v; want the response after the notifications, which the SDK need not see", msg)
	}
	per := (ms1.TotalAlloc - ms0.TotalAlloc) / n
	t.Logf("%d bytes allocated per progress notification", per)
	if per > 2048 {
		t.Errorf("%d bytes allocated per progress notification; want at most 2 KiB", per)
	}
}

// TestObservedProgressCost: a progress notification seen in a streamable
// HTTP response (wireBody) is decoded once, as on stdio, not with the
// SDK's decoder (tens of KiB each: 20,000 of them cost 3.1-3.5 s of CPU,
// client and server, and 1.7-2.2 s with this).
func TestObservedProgressCost(t *testing.T) {
	s := &server{calls: map[string]*forwarder{}}
	line := []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"gone","progress":1}}`)
	if n := testing.AllocsPerRun(100, func() { s.observeData(line, nil) }); n > 20 {
		t.Errorf("%.0f allocations to observe a progress notification; want at most 20", n)
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for range 100 {
		s.observeData(line, nil)
	}
	runtime.ReadMemStats(&ms1)
	if per := (ms1.TotalAlloc - ms0.TotalAlloc) / 100; per > 2048 {
		t.Errorf("%d bytes allocated to observe a progress notification; want at most 2 KiB", per)
	}
}

// TestStdioOutputUnreadable: a stdio server that logs on stdout runs, its
// lines logged; one that sends a message past the bound has its session
// ended saying why, in the log and in the result of a call in flight,
// where the SDK said only that the connection closed.
func TestStdioOutputUnreadable(t *testing.T) {
	t.Run("logs on stdout", func(t *testing.T) {
		g, reg := newGateway(t)
		logs := &logbuf.Buffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "b", Command: stdioServer, Env: map[string]string{"TESTSERVER_BANNER": "1"}}}); err != nil {
			t.Fatal(err)
		}
		snap := sourcetest.WaitTools(t, reg, "the tools of a server that logs on stdout", sourcetest.Has("b_read"))
		if r := call(t, context.Background(), snap, "b_read", `{"text":"hi"}`, nil); r.IsError || text(r) != `{"text":"hi"}` {
			t.Errorf("call: %q", text(r))
		}
		waitLog(t, logs, `msg="MCP server stdout, not JSON-RPC; skipped" mcp_server=b line="Starting the test MCP server on stdio..."`)
	})
	t.Run("logs a line that opens a JSON value", func(t *testing.T) {
		// server-everything behind a wrapper script that echoed "[" never
		// connected: its answer to initialize was read as the rest of a
		// batch, and skipped with the line after it.
		g, reg := newGateway(t)
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "o", Command: stdioServer, Env: map[string]string{"TESTSERVER_BANNER": "["}}}); err != nil {
			t.Fatal(err)
		}
		snap := sourcetest.WaitTools(t, reg, "the tools of a server that wrote [ on stdout", sourcetest.Has("o_read"))
		if r := call(t, context.Background(), snap, "o_read", `{"text":"hi"}`, nil); r.IsError || text(r) != `{"text":"hi"}` {
			t.Errorf("call: %q", text(r))
		}
	})
	t.Run("a message past the bound", func(t *testing.T) {
		g, reg := newGateway(t)
		logs := &logbuf.Buffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		g.set.MinBackoff, g.set.MaxBackoff = time.Minute, time.Minute // given up means gone for this test
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "h", Command: stdioServer, Env: map[string]string{"TESTSERVER_HUGE_TOOL": "1"}}}); err != nil {
			t.Fatal(err)
		}
		snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("h_huge"))
		r := call(t, context.Background(), snap, "h_huge", `{}`, nil)
		want := `MCP server "h": the server sent a response larger than 16 MiB; the session was given up, with its calls in flight`
		if !r.IsError || text(r) != want {
			t.Errorf("call: %.200q; want an error result %q", text(r), want)
		}
		waitLog(t, logs, "the session was given up: the server sent a response larger than 16 MiB")
	})
}

// waitLog waits until logs hold want.
func waitLog(t *testing.T, logs *logbuf.Buffer, want string) {
	t.Helper()
	for limit := time.Now().Add(waitLimit); !strings.Contains(logs.String(), want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("the log does not say %q:\n%s", want, logs)
		}
	}
}

// TestPrettyPrintedCost: a message pretty-printed over many lines is
// scanned once, not again at each line: a 55 KB result over 5,000 lines
// took 1.7 s of CPU and 40,000 lines (430 KiB) 98 s, each line decoding
// all the lines before it, allocating their copy each time.
func TestPrettyPrintedCost(t *testing.T) {
	items := make([]string, 5000)
	for i := range items {
		items[i] = "line"
	}
	flat, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "result": map[string]any{"items": items}})
	if err != nil {
		t.Fatal(err)
	}
	pretty, err := json.MarshalIndent(json.RawMessage(flat), "", " ")
	if err != nil {
		t.Fatal(err)
	}
	c, w, _ := pipeConn(t)
	go func() { w.Write(append(pretty, '\n')); w.Close() }()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	msg, err := c.Read(context.Background())
	runtime.ReadMemStats(&ms1)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := msg.(*jsonrpc.Response); !ok || r.ID.Raw() != int64(1) || len(r.Result) < len(items)*len(`"line",`) {
		t.Fatalf("Read: %#v; want the response", msg)
	}
	alloc := ms1.TotalAlloc - ms0.TotalAlloc
	t.Logf("%d bytes allocated to read a message of %d bytes over %d lines", alloc, len(pretty), bytes.Count(pretty, []byte("\n"))+1)
	if alloc > uint64(64*len(pretty)) {
		t.Errorf("%d bytes allocated to read a message of %d bytes; want at most 64 times its size", alloc, len(pretty))
	}
}
