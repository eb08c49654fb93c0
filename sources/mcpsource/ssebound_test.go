package mcpsource

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
)

// readEvent is an event as the SDK reads one (mcp's scanEventsLimited and
// the streamable client's loop): lines split at '\n' and trimmed of
// "\r\n", data lines trimmed and joined with '\n', a blank line or the
// end ending the event.
type readEvent struct {
	name, id string
	data     string
	bytes    int // of its lines, as the SDK counts them against its bound
}

func readEvents(t *testing.T, stream []byte) []readEvent {
	t.Helper()
	var evs []readEvent
	var ev readEvent
	var data []string
	dispatch := func() {
		ev.data = strings.Join(data, "\n")
		if ev != (readEvent{bytes: ev.bytes}) || len(data) > 0 {
			evs = append(evs, ev)
		}
		ev, data = readEvent{}, nil
	}
	for len(stream) > 0 {
		line := stream
		if i := bytes.IndexByte(stream, '\n'); i >= 0 {
			line = stream[:i+1]
		}
		stream = stream[len(line):]
		ev.bytes += len(line)
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			dispatch()
			continue
		}
		field, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			t.Fatalf("a line the SDK fails the stream on: %.100q", line)
		}
		switch string(field) {
		case "event":
			ev.name = string(bytes.TrimSpace(value))
		case "id":
			ev.id = string(bytes.TrimSpace(value))
		case "data":
			data = append(data, string(bytes.TrimSpace(value)))
		}
	}
	if ev.bytes > 0 {
		dispatch()
	}
	return evs
}

// messages returns the messages the SDK decodes from evs, and the last
// event ID it would resume after.
func messages(t *testing.T, evs []readEvent) (msgs []jsonrpc.Message, lastID string) {
	t.Helper()
	for _, ev := range evs {
		if ev.id != "" {
			lastID = ev.id
		}
		if ev.data == "" || ev.name != "" && ev.name != "message" {
			continue
		}
		m, err := jsonrpc.DecodeMessage([]byte(ev.data))
		if err != nil {
			t.Fatalf("the SDK would fail the stream on %.100q: %v", ev.data, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, lastID
}

// chunky reads its stream in pieces of 1 to max bytes.
type chunky struct {
	r   *bytes.Reader
	rnd *rand.Rand
	max int
}

func (c *chunky) Read(p []byte) (int, error) {
	n := 1 + c.rnd.IntN(c.max)
	return c.r.Read(p[:min(n, len(p))])
}

func (c *chunky) Close() error { return nil }

// readAllIn reads r to its end in reads of size bytes.
func readAllIn(r io.Reader, size int) ([]byte, error) {
	var out bytes.Buffer
	p := make([]byte, size)
	for {
		n, err := r.Read(p)
		out.Write(p[:n])
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

// TestSSEBound: an SSE event past the bound reaches the SDK cut and named
// so that it is skipped, and each response it held reaches it as a
// stand-in error to the response's ID, once the event has ended; every
// other byte passes as it came, however the stream is cut into reads.
func TestSSEBound(t *testing.T) {
	const bound = 300
	big := strings.Repeat("A", 1000)
	small := `data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}` + "\n\n"
	tests := []struct {
		name   string
		stream string
		ids    []string // of the stand-ins the SDK gets, in order
		others int      // messages the SDK gets beyond the stand-ins
		lastID string   // the event ID it would resume after
		size   int      // the size the stand-ins say, when not 0
		same   bool     // the stream passes unchanged
	}{
		{name: "small events pass as they are",
			stream: small + "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n: a comment\n\n" + small,
			others: 3, lastID: "1", same: true},
		{name: "an answer past the bound, its ID first",
			stream: `data: {"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + big + `"}]}}` + "\n\n" + small,
			ids:    []string{"7"}, others: 1,
			size: len(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + big + `"}]}}`)},
		{name: "its ID last, and an event ID after its data",
			stream: small + `data: {"result":{"content":[{"id":1,"text":"` + big + `"}]},"jsonrpc":"2.0","id":"s\"1"}` + "\nid: 42\n\n" + small,
			ids:    []string{`"s\"1"`}, others: 2, lastID: "42"},
		{name: "over data lines, with CRLF",
			stream: "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata:\"id\":9,\r\ndata: \"result\":{\"t\":\"" + big + "\"}}\r\n\r\n" + small,
			ids:    []string{"9"}, others: 1},
		{name: "a notification past the bound",
			stream: `data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"id":3,"message":"` + big + `"}}` + "\n\n" + small,
			others: 1},
		{name: "a request from the server past the bound",
			stream: `data: {"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"x":"` + big + `"}}` + "\n\n" + small,
			others: 1},
		{name: "an event of another name past the bound",
			stream: "event: ping\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"x\":\"" + big + "\"}}\n\n" + small,
			others: 1},
		{name: "a name of message after another",
			stream: "event: ping\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"x\":\"" + big + "\"}}\n\n" + small,
			ids:    []string{"4"}, others: 1},
		{name: "the stream ends within it",
			stream: small + `data: {"jsonrpc":"2.0","id":8,"result":{"x":"` + big + `"}}`,
			ids:    []string{"8"}, others: 1},
		{name: "cut on a line's end",
			stream: "data: {\"jsonrpc\":\"2.0\",\"id\":6,\"result\":\n" + strings.Repeat("data: \"\"\n", 80) + "data: }\n\n" + small,
			ids:    []string{"6"}, others: 1},
		{name: "cut within a field's name",
			// The bound falls on "da" of the second line.
			stream: "data: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"t\":" + strings.Repeat(" ", bound-2-len(`data: {"jsonrpc":"2.0","id":5,"result":{"t":`)) + "\ndata: \"" + big + "\"}}\n\n" + small,
			ids:    []string{"5"}, others: 1},
		{name: "cut within a line of carriage returns",
			stream: "data: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"t\":" + strings.Repeat(" ", bound-2-len(`data: {"jsonrpc":"2.0","id":5,"result":{"t":`)) + "\n\r\r\rdata: \"" + big + "\"}}\n\n" + small,
			ids:    []string{"5"}, others: 1},
		{name: "two past the bound, one after the other",
			stream: `data: {"jsonrpc":"2.0","id":1,"result":{"x":"` + big + `"}}` + "\n\n" + `data: {"jsonrpc":"2.0","id":2,"result":{"x":"` + big + `"}}` + "\n\n",
			ids:    []string{"1", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, read := range []struct{ chunk, p int }{{1, 1}, {1, 4096}, {7, 3}, {64, 5}, {4096, 4096}, {5000, 100}} {
				for seed := range uint64(4) {
					logs := &logbuf.Buffer{}
					h := &httpSession{s: &server{log: slog.New(slog.NewTextHandler(logs, nil))}}
					src := &chunky{r: bytes.NewReader([]byte(tt.stream)), rnd: rand.New(rand.NewPCG(seed, 1)), max: read.chunk}
					out, err := readAllIn(&sseBound{ReadCloser: src, h: h, max: bound}, read.p)
					if err != nil {
						t.Fatal(err)
					}
					where := fmt.Sprintf("reads of %d into %d, seed %d", read.chunk, read.p, seed)
					if tt.same {
						if string(out) != tt.stream {
							t.Fatalf("%s: changed:\n%q\nwant\n%q", where, out, tt.stream)
						}
						continue
					}
					evs := readEvents(t, out)
					for _, ev := range evs {
						if ev.bytes > bound+sseSlack {
							t.Errorf("%s: an event of %d bytes reached the SDK", where, ev.bytes)
						}
					}
					msgs, lastID := messages(t, evs)
					var ids []string
					others := 0
					for _, m := range msgs {
						r, ok := m.(*jsonrpc.Response)
						var werr *jsonrpc.Error
						if !ok || !errors.As(r.Error, &werr) || werr.Code != codeAnswerTooLarge {
							others++
							continue
						}
						id, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: r.ID})
						ids = append(ids, string(bytes.TrimSuffix(bytes.TrimPrefix(id, []byte(`{"jsonrpc":"2.0","id":`)), []byte("}"))))
						if tt.size > 0 && !strings.Contains(werr.Message, fmt.Sprintf("(%d bytes)", tt.size)) {
							t.Errorf("%s: %q does not say the size, %d", where, werr.Message, tt.size)
						}
					}
					if fmt.Sprint(ids) != fmt.Sprint(tt.ids) || others != tt.others || lastID != tt.lastID {
						t.Fatalf("%s: stand-ins for %v, %d other messages, last event ID %q; want %v, %d, %q\n%.2000q", where, ids, others, lastID, tt.ids, tt.others, tt.lastID, out)
					}
					if !strings.Contains(logs.String(), "MCP server sent a message past the bound; dropped") {
						t.Errorf("%s: nothing logged:\n%s", where, logs)
					}
				}
			}
		})
	}
}

// TestSSEAnswerPastTheBound: real servers over streamable HTTP answer a
// call with 17 MiB of text as an SSE event (the go-sdk's, ID first, on a
// session of its own; the official TypeScript SDK's, ID last, stateless):
// the call fails saying its answer was too large, a call in flight beside
// it and the session go on, and the next call is answered.
func TestSSEAnswerPastTheBound(t *testing.T) {
	t.Parallel()
	want := regexp.MustCompile(`^MCP server "(go|ts)" answered the call, but its answer was larger than the 16 MiB a message may be \(\d+ bytes\), so it was dropped; the session goes on$`)
	check := func(t *testing.T, cfg ServerConfig, beside func(snap *tools.Snapshot) (release func() string), next, nextArgs, nextWant string) {
		g, reg := newGateway(t)
		logs := &logbuf.Buffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
			t.Fatal(err)
		}
		snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has(cfg.Name+"_huge", next))
		var release func() string
		if beside != nil {
			release = beside(snap)
		}
		if r := call(t, context.Background(), snap, cfg.Name+"_huge", `{}`, nil); !r.IsError || !want.MatchString(text(r)) {
			t.Errorf("call: %.300q; want an error result matching %s", text(r), want)
		}
		if release != nil {
			if got := release(); got != "released" {
				t.Errorf("the call in flight beside it: %.300q; want released", got)
			}
		}
		if r := call(t, context.Background(), snap, next, nextArgs, nil); r.IsError || text(r) != nextWant {
			t.Errorf("the next call: %.300q; want %q", text(r), nextWant)
		}
		waitLog(t, logs, "MCP server sent a message past the bound; dropped")
		if strings.Contains(logs.String(), "given up") {
			t.Errorf("the session was given up:\n%.3000s", logs)
		}
	}
	t.Run("go-sdk", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		urlfile, releasefile := filepath.Join(dir, "url"), filepath.Join(dir, "release")
		cmd := exec.Command(stdioServer)
		cmd.Env = append(os.Environ(), "TESTSERVER_URLFILE="+urlfile, "TESTSERVER_HUGE_TOOL=1", "TESTSERVER_RELEASEFILE="+releasefile)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		beside := func(snap *tools.Snapshot) func() string {
			waited := make(chan *tools.Result, 1)
			go func() { waited <- call(t, context.Background(), snap, "go_wait", `{}`, nil) }()
			return func() string {
				if err := os.WriteFile(releasefile, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return text(<-waited)
			}
		}
		check(t, ServerConfig{Name: "go", URL: waitFile(t, urlfile)}, beside, "go_read", `{"text":"hi"}`, `{"text":"hi"}`)
	})
	t.Run("TypeScript SDK", func(t *testing.T) {
		t.Parallel()
		everything(t) // node, and the SDK installed with server-everything
		cmd := exec.Command("node", "testdata/everything/huge.mjs", "http")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		url, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("the server wrote no URL: %v", err)
		}
		check(t, ServerConfig{Name: "ts", URL: strings.TrimSpace(url)}, nil, "ts_echo", `{"message":"after"}`, "after")
	})
}

// BenchmarkSSEBound measures what the bound adds to reading an SSE stream
// within it: its scan of each event's data.
//
//	go test -run NONE -bench SSEBound ./sources/mcpsource
func BenchmarkSSEBound(b *testing.B) {
	for _, ev := range []struct {
		name string
		text int
	}{{"small", 100}, {"1MiB", 1 << 20}} {
		event := []byte(`data: {"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + strings.Repeat("A", ev.text) + `"}]}}` + "\n\n")
		stream := bytes.Repeat(event, max(1, (1<<20)/len(event)))
		h := &httpSession{s: &server{log: slog.New(slog.DiscardHandler)}}
		p := make([]byte, 4096)
		for _, bounded := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/bounded=%v", ev.name, bounded), func(b *testing.B) {
				b.SetBytes(int64(len(stream)))
				b.ReportAllocs()
				for b.Loop() {
					var r io.Reader = bytes.NewReader(stream)
					if bounded {
						r = &sseBound{ReadCloser: io.NopCloser(r), h: h, max: maxResponseBody}
					}
					for {
						if _, err := r.Read(p); err != nil {
							break
						}
					}
				}
			})
		}
	}
}

// FuzzSSEBound: a stream whose events are all within the bound passes as
// it came, however it is read; any other reaches the SDK with no event
// past the bound and its slack, and, if the SDK could read it, still
// readable.
func FuzzSSEBound(f *testing.F) {
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"x\":\""+strings.Repeat("A", 90)+"\"}}\n\nid: 3\ndata: {}\n\n"), uint8(3), uint8(5))
	f.Add([]byte("event: a\r\ndata:\"x\"\r\n\r\n:c\n\ndata: [{\"id\":\"q\",\"result\":1}]"), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, chunk, psize uint8) {
		const bound = 64
		fits := true
		for _, ev := range eventSizes(stream) {
			fits = fits && ev <= bound
		}
		h := &httpSession{s: &server{log: slog.New(slog.DiscardHandler)}}
		src := &chunky{r: bytes.NewReader(stream), rnd: rand.New(rand.NewPCG(uint64(chunk), uint64(psize))), max: int(chunk%32) + 1}
		out, err := readAllIn(&sseBound{ReadCloser: src, h: h, max: bound}, int(psize%32)+1)
		if err != nil {
			t.Fatal(err)
		}
		if fits && !bytes.Equal(out, stream) {
			t.Fatalf("a stream within the bound changed:\n%q\nto\n%q", stream, out)
		}
		for _, ev := range eventSizes(out) {
			if ev > bound+sseSlack {
				t.Fatalf("an event of %d bytes reached the SDK:\n%q", ev, out)
			}
		}
		if wellFormed(stream) && !wellFormed(out) {
			t.Fatalf("a stream the SDK reads became one it fails on:\n%q\nto\n%q", stream, out)
		}
	})
}

// wellFormed reports whether the SDK reads stream without failing it on a
// line without a colon.
func wellFormed(stream []byte) bool {
	for line := range bytes.SplitSeq(stream, []byte("\n")) {
		if line = bytes.TrimRight(line, "\r\n"); len(line) > 0 && !bytes.Contains(line, []byte(":")) {
			return false
		}
	}
	return true
}

// eventSizes returns the bytes of each event's lines in stream, as the SDK
// counts them against its bound.
func eventSizes(stream []byte) []int {
	var sizes []int
	n := 0
	for len(stream) > 0 {
		line := stream
		if i := bytes.IndexByte(stream, '\n'); i >= 0 {
			line = stream[:i+1]
		}
		stream = stream[len(line):]
		n += len(line)
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			sizes, n = append(sizes, n), 0
		}
	}
	return append(sizes, n)
}

// TestSSEBoundBroken: a stream that breaks within an event past the bound
// hands the SDK the stand-in for the answer it held, saying that the
// answer was more than what was read, and then the break.
func TestSSEBoundBroken(t *testing.T) {
	const bound = 300
	event := `data: {"jsonrpc":"2.0","id":7,"result":{"x":"` + strings.Repeat("A", 1000)
	h := &httpSession{s: &server{log: slog.New(slog.DiscardHandler)}}
	broken := errors.New("connection reset")
	src := io.NopCloser(io.MultiReader(strings.NewReader(event), iotest.ErrReader(broken)))
	out, err := readAllIn(&sseBound{ReadCloser: src, h: h, max: bound}, 64)
	if !errors.Is(err, broken) {
		t.Fatalf("read: %v; want the break", err)
	}
	msgs, _ := messages(t, readEvents(t, out))
	var werr *jsonrpc.Error
	if len(msgs) != 1 || !errors.As(msgs[0].(*jsonrpc.Response).Error, &werr) || werr.Code != codeAnswerTooLarge ||
		!strings.Contains(werr.Message, fmt.Sprintf("(more than %d bytes)", len(event)-len("data: "))) {
		t.Fatalf("the SDK reads %v; want one stand-in saying the answer was more than what was read", msgs)
	}
}
