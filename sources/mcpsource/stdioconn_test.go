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
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
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
		// A line past the bound is read to its end and dropped; what it
		// answered fails, and the lines after it are read.
		huge := strings.Repeat("x", maxResponseBody)
		c, w, logs := pipeConn(t)
		go func() {
			io.WriteString(w, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"`+huge+`"}}`+"\n")
			io.WriteString(w, `{"result":{"content":[{"type":"text","text":"`+huge+`"}],"id":"not this"},"jsonrpc":"2.0","id":7}`+"\n")
			io.WriteString(w, `[{"jsonrpc":"2.0","id":"a\"b","result":{"id":1,"text":"`+huge+`"}},{"jsonrpc":"2.0","id":9,"error":{"code":1,"message":"m"}},{"jsonrpc":"2.0","id":3,"method":"roots/list"}]`+"\n")
			io.WriteString(w, `{"jsonrpc":"2.0","id":8,"result":{}}`+"\n")
			w.Close()
		}()
		for _, want := range []any{int64(7), `a"b`, int64(9)} {
			m, err := c.Read(context.Background())
			r, ok := m.(*jsonrpc.Response)
			if err != nil || !ok || r.ID.Raw() != want || r.Error == nil {
				t.Fatalf("Read: %#v, %v; want an error response to %v", m, err, want)
			}
			var werr *jsonrpc.Error
			if !errors.As(r.Error, &werr) || werr.Code != codeAnswerTooLarge || !strings.Contains(werr.Message, "larger than the 16 MiB a message may be") {
				t.Errorf("response to %v: %v; want code %d saying it was too large", want, r.Error, codeAnswerTooLarge)
			}
		}
		if m, err := c.Read(context.Background()); err != nil || m.(*jsonrpc.Response).ID.Raw() != int64(8) {
			t.Errorf("after the long lines: %#v, %v; want the response to 8", m, err)
		}
		if _, err := c.Read(context.Background()); err != io.EOF {
			t.Errorf("at the end: %v; want EOF", err)
		}
		if err := c.lostCause(); err != nil {
			t.Errorf("lostCause: %v; want none", err)
		}
		for _, want := range []string{"answers_failed=0 messages_dropped=1", "answers_failed=1 messages_dropped=0", "answers_failed=2 messages_dropped=1"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q:\n%.2000s", want, logs)
			}
		}
		if cap(c.line) > 1<<20 {
			t.Errorf("the reader keeps a %d-byte buffer after the long lines", cap(c.line))
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
		// The call it answered fails saying so; the notification is
		// dropped; a call in flight beside them, the session and the
		// process go on.
		g, reg := newGateway(t)
		logs := &logbuf.Buffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		release := filepath.Join(t.TempDir(), "release")
		mark := t.Name()
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "h", Command: stdioServer, Env: map[string]string{
			"TESTSERVER_HUGE_TOOL": "1", "TESTSERVER_RELEASEFILE": release, "TOOLWIRE_TEST_MARK": mark,
		}}}); err != nil {
			t.Fatal(err)
		}
		snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("h_huge"))
		pid := markedProcess(t, mark, 0)
		waited := make(chan *tools.Result, 1)
		go func() { waited <- call(t, context.Background(), snap, "h_wait", `{}`, nil) }()
		r := call(t, context.Background(), snap, "h_huge", `{}`, nil)
		want := `MCP server "h" answered the call, but its answer was larger than the 16 MiB a message may be (`
		if !r.IsError || !strings.HasPrefix(text(r), want) || !strings.HasSuffix(text(r), " bytes), so it was dropped; the session goes on") {
			t.Errorf("call: %.300q; want an error result beginning %q", text(r), want)
		}
		if r := call(t, context.Background(), snap, "h_huge_note", `{}`, nil); r.IsError {
			t.Errorf("a call whose notification was past the bound: %.300q; want its result", text(r))
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if r := <-waited; r.IsError || text(r) != "released" {
			t.Errorf("the call in flight beside them: %.300q; want released", text(r))
		}
		if r := call(t, context.Background(), snap, "h_read", `{"text":"hi"}`, nil); r.IsError || text(r) != `{"text":"hi"}` {
			t.Errorf("a call after them: %.300q", text(r))
		}
		if !alive(pid) || markedProcess(t, mark, 0) != pid {
			t.Errorf("the server's process %d was replaced", pid)
		}
		waitLog(t, logs, "MCP server sent a message past the bound; dropped")
		if strings.Contains(logs.String(), "given up") {
			t.Errorf("the session was given up:\n%.3000s", logs)
		}
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

// TestTypeScriptAnswerPastTheBound: a stdio server on the official
// TypeScript SDK (testdata/everything/huge.mjs, on server-everything's copy
// of it), which writes a response's id after its result, answers a call
// with 17 MiB of text: that call fails saying its answer was too large,
// found by the ID at the end of the line, and the same process answers the
// next call. (server-everything's echo cannot send it: given a 17 MiB
// request it exits, having answered nothing; 9 MiB it echoes.)
func TestTypeScriptAnswerPastTheBound(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("testdata/everything/huge.mjs")
	if err != nil {
		t.Fatal(err)
	}
	everything(t) // node, and the SDK installed with server-everything
	g, reg := newGateway(t)
	mark := t.Name() // unique among the tests running beside it
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "ts", Command: "node", Args: []string{script},
		Env: map[string]string{"TOOLWIRE_TEST_MARK": mark}}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the TypeScript server's tools", sourcetest.Has("ts_huge", "ts_echo"))
	pid := markedProcess(t, mark, 0)
	r := call(t, context.Background(), snap, "ts_huge", `{}`, nil)
	want := regexp.MustCompile(`^MCP server "ts" answered the call, but its answer was larger than the 16 MiB a message may be \(\d+ bytes\), so it was dropped; the session goes on$`)
	if !r.IsError || !want.MatchString(text(r)) {
		t.Errorf("call: %.300q; want an error result matching %s", text(r), want)
	}
	if r := call(t, context.Background(), snap, "ts_echo", `{"message":"after"}`, nil); r.IsError || text(r) != "after" {
		t.Errorf("the next call: %.300q", text(r))
	}
	if markedProcess(t, mark, 0) != pid {
		t.Errorf("the server's process %d was replaced", pid)
	}
}
