package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// Tests of invariant 11: every input is bounded, and every response
// respects its size limit, whatever the input.

func TestInvariant11_LongIDsAndKeysAreInvalidArgument(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	long := strings.Repeat("k", 1<<20)
	keyedCall := func(id, key string) *toolwirev1.ToolCall { return keyed(id, "echo", `{"text":"x"}`, key) }
	tests := []struct {
		name    string
		req     *toolwirev1.ExecuteBatchRequest
		want    string
		wantErr bool
	}{
		{"call_id of 256 bytes", calls(call("a", "echo", ""), call(strings.Repeat("i", 256), "echo", "")), "", false},
		{"call_id of 257 bytes", calls(call("a", "echo", ""), call(strings.Repeat("i", 257), "echo", "")), "call 1: call_id", true},
		{"call_id of 1 MiB", calls(call(long, "echo", "")), "call 0: call_id", true},
		{"idempotency_key of 256 bytes", calls(keyedCall("a", strings.Repeat("k", 256))), "", false},
		{"idempotency_key of 257 bytes", calls(call("a", "echo", ""), keyedCall("b", strings.Repeat("k", 257))), `call 1 (call_id "b"): idempotency_key`, true},
		{"idempotency_key of 1 MiB", calls(keyedCall("a", long)), `call 0 (call_id "a"): idempotency_key`, true},
		{"session_id of 1 MiB", &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "echo", "")}, SessionId: long}, "session_id", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events, err := te.runErr(context.Background(), tt.req)
			if !tt.wantErr {
				if err != nil || len(results(t, events)) != len(tt.req.GetCalls()) {
					t.Fatalf("err = %v, %d events; want every call answered", err, len(events))
				}
				return
			}
			msg := message(err)
			if CodeOf(err) != InvalidArgument || !strings.Contains(msg, tt.want) || !strings.Contains(msg, "the limit is 256") {
				t.Errorf("err = %.300v; want InvalidArgument containing %q and the limit", err, tt.want)
			}
			if len(msg) > 400 {
				t.Errorf("the error echoes %d bytes; want the value cut short", len(msg))
			}
			if len(events) != 0 {
				t.Errorf("%d events before the error; want none", len(events))
			}
		})
	}
}

// keyLog is a store that remembers the longest key and scope it was given.
type keyLog struct {
	store.Store
	mu      sync.Mutex
	longest int
}

func (k *keyLog) saw(s string) {
	k.mu.Lock()
	k.longest = max(k.longest, len(s))
	k.mu.Unlock()
}

func (k *keyLog) Claim(ctx context.Context, key, fp, owner string, lease, ttl time.Duration) (store.Claim, error) {
	k.saw(key)
	return k.Store.Claim(ctx, key, fp, owner, lease, ttl)
}

func (k *keyLog) Complete(ctx context.Context, key, owner string, result []byte, ttl time.Duration) error {
	k.saw(key)
	return k.Store.Complete(ctx, key, owner, result, ttl)
}

func (k *keyLog) SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error {
	k.saw(scope)
	return k.Store.SetVar(ctx, scope, name, value, ttl)
}

func (k *keyLog) max() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.longest
}

func TestInvariant11_StoresNeverReceiveALongKey(t *testing.T) {
	t.Parallel()
	backends := map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memory.New(memory.Options{}) },
		"bolt": func(t *testing.T) store.Store {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "idem.db"), bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"miniredis": func(t *testing.T) store.Store {
			rc := goredis.NewClient(&goredis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { rc.Close() })
			return redis.New(rc, redis.Options{})
		},
		"redis": func(t *testing.T) store.Store {
			rc := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
			t.Cleanup(func() { rc.Close() })
			return redis.New(rc, redis.Options{Prefix: fmt.Sprintf("bounds-%d:", time.Now().UnixNano())})
		},
	}
	// derived keys its key from its arguments, as long as they are.
	derived := tools.Tool{Name: "derived", Description: "keyed by its argument",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string"}}}`),
		IdempotencyKey: func(args json.RawMessage) (string, bool) {
			var a struct{ S string }
			return a.S, json.Unmarshal(args, &a) == nil && a.S != ""
		},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text("ran"), nil },
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := &keyLog{Store: open(t)}
			t.Cleanup(func() { st.Close() })
			te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st}, derived)
			ctx := context.Background()
			if _, err := te.runErr(ctx, calls(keyed("a", "echo", `{"text":"x"}`, strings.Repeat("k", 3<<20)))); CodeOf(err) != InvalidArgument {
				t.Fatalf("a 3 MB key: %v; want InvalidArgument", err)
			}
			if st.max() != 0 {
				t.Fatalf("the store saw a key of %d bytes from a refused batch", st.max())
			}
			long := strings.Repeat("d", 512<<10)
			for range 2 { // the second is replayed under the same short key
				events := te.run(t, calls(call("b", "derived", `{"s":"`+long+`"}`)))
				if r := results(t, events)["b"]; r.GetIsError() {
					t.Fatalf("derived key: %q", text(r))
				}
			}
			te.run(t, calls(keyed("c", "echo", `{"text":"x"}`, strings.Repeat("k", 256))))
			// The scope adds the caller and the tool, quoted, to the key.
			if got := st.max(); got == 0 || got > 256+64 {
				t.Errorf("the longest key the store saw is %d bytes; want at most %d", got, 256+64)
			}
		})
	}
}

func TestInvariant11_LongToolNameIsAnUnknownToolCutShort(t *testing.T) {
	t.Parallel()
	logs := &logbuf.Buffer{}
	te := newTestBedWith(t, Config{MaxResultBytes: 1000},
		Deps{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, n := range []int{129, 1 << 20, 3 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			name := "multi_tool_use." + strings.Repeat("x", n-len("multi_tool_use."))
			for _, name := range []string{strings.Repeat("x", n), name} {
				events, err := te.runErr(context.Background(), calls(call("a", name, `{}`), call("b", "echo", `{"text":"ok"}`)))
				if err != nil {
					t.Fatalf("name of %d bytes: %v", n, err)
				}
				if events[len(events)-1].GetFinished() == nil {
					t.Fatal("the stream did not end with BatchFinished")
				}
				checkFits(t, events, te.e.Config().MaxMessageBytes)
				res := results(t, events)
				r := res["a"]
				if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL || text(res["b"]) != "ok" {
					t.Fatalf("got %v %.200q; want UNKNOWN_TOOL, and the other call run", r.GetErrorKind(), text(r))
				}
				if !strings.Contains(text(r), fmt.Sprintf("cut from %d bytes", n)) || len(text(r)) > 1000 {
					t.Errorf("text of %d bytes %.300q; want the name cut short and its length told", len(text(r)), text(r))
				}
				if len(r.GetToolName()) > 128 {
					t.Errorf("tool_name is %d bytes; want at most 128", len(r.GetToolName()))
				}
			}
		})
	}
	if !strings.Contains(logs.String(), `"call finished"`) {
		t.Error("no debug line about a call was logged")
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 1000 {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
}

// boundsTools are tools whose output and failures are as large as a test
// asks.
func boundsTools() []tools.Tool {
	nSchema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	n := func(call *tools.Call) int {
		var a struct{ N int }
		_ = json.Unmarshal(call.Arguments, &a)
		return a.N
	}
	return []tools.Tool{
		{Name: "panic_big", Description: "panics with n bytes", InputSchema: nSchema,
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) { panic(strings.Repeat("p", n(call))) }},
		{Name: "error_big", Description: "fails with n bytes", InputSchema: nSchema,
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				return nil, fmt.Errorf("failed: %s", strings.Repeat("e", n(call)))
			}},
		{Name: "loud", Description: "reports progress of n bytes, message and output", InputSchema: nSchema, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				call.Report(tools.Progress{Message: strings.Repeat("m", n(call)), Output: strings.Repeat("o", n(call))})
				call.Output(strings.Repeat("é", n(call)))
				return tools.Text("said"), nil
			}},
		{Name: "flood", Description: "returns n bytes each of text, image and details", InputSchema: nSchema, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				n := n(call)
				return &tools.Result{Content: []tools.Content{{Text: strings.Repeat("t", n)}, {Data: make([]byte, n), MIMEType: "image/png"}},
					Details: json.RawMessage(`"` + strings.Repeat("d", n) + `"`)}, nil
			}},
		{Name: "blocks", Description: "returns n empty text blocks", InputSchema: nSchema, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				return &tools.Result{Content: make([]tools.Content, n(call))}, nil
			}},
	}
}

// checkBounded fails the test for any event of events over limit bytes of
// output (a result besides its marker, a progress report's message and
// output) or with a marker over 300 bytes.
func checkBounded(tb testing.TB, events []*toolwirev1.ExecuteBatchResponse, limit int) {
	tb.Helper()
	const maxMarker = 300
	for _, ev := range events {
		if r := ev.GetResult(); r != nil {
			if p := payload(r); p > limit {
				tb.Errorf("call %.40q: a result of %d bytes (%.100q), over the %d-byte limit", r.GetCallId(), p, text(r), limit)
			}
			if r.GetTruncated() {
				if m := r.GetContent()[len(r.GetContent())-1].GetText().GetText(); len(m) > maxMarker || !strings.HasPrefix(m, "[output truncated") {
					tb.Errorf("call %.40q: marker %.400q", r.GetCallId(), m)
				}
			}
			if len(r.GetCallId()) > MaxIDBytes || len(r.GetToolName()) > MaxNameBytes {
				tb.Errorf("result echoes a call_id of %d bytes, a tool_name of %d", len(r.GetCallId()), len(r.GetToolName()))
			}
		}
		if p := ev.GetProgress(); p != nil && len(p.GetMessage())+len(p.GetOutput()) > limit+2*maxMarker {
			tb.Errorf("call %.40q: progress of %d+%d bytes, over the %d-byte limit", p.GetCallId(), len(p.GetMessage()), len(p.GetOutput()), limit)
		}
	}
}

func TestInvariant11_EveryResultRespectsMaxResultBytes(t *testing.T) {
	t.Parallel()
	const limit = 300
	te := newTestBed(t, Config{MaxResultBytes: limit, MaxCallTimeout: 50 * time.Millisecond}, boundsTools()...)
	big := strings.Repeat("z", 10_000)
	te.run(t, calls(keyed("k0", "echo", `{"text":"one"}`, strings.Repeat("k", 256))))
	tests := []struct {
		name string
		call *toolwirev1.ToolCall
		kind toolwirev1.ErrorKind
	}{
		{"unknown tool listing the registered ones", call("a", "nope", ``), toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL},
		{"schema error quoting the input", call("a", "echo", `{"text":"x","`+big+`":1}`), toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS},
		{"panic", call("a", "panic_big", `{"n":10000}`), toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR},
		{"tool error", call("a", "error_big", `{"n":10000}`), toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR},
		{"idempotency conflict quoting the key", keyed("a", "echo", `{"text":"two"}`, strings.Repeat("k", 256)), toolwirev1.ErrorKind_ERROR_KIND_IDEMPOTENCY_CONFLICT},
		{"timeout", call("a", "sleep", `{"ms":5000}`), toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT},
		{"progress", call("a", "loud", `{"n":10000}`), toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events := te.run(t, calls(tt.call))
			r := results(t, events)["a"]
			if r.GetErrorKind() != tt.kind {
				t.Fatalf("kind %v %.200q; want %v", r.GetErrorKind(), text(r), tt.kind)
			}
			checkBounded(t, events, limit)
		})
	}
}

// TestInvariant11_ResultOfTooManyBlocksIsCutNotABrokenStream: a result
// whose encoding would pass MaxMessageBytes (a transport's message limit,
// which would break its stream) is cut in blocks, with a marker, and fits.
func TestInvariant11_ResultOfTooManyBlocksIsCutNotABrokenStream(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxMessageBytes: 64 << 10}, boundsTools()...)
	events, err := te.runErr(context.Background(), calls(call("a", "blocks", `{"n":50000}`), call("b", "blocks", `{"n":10}`)))
	if err != nil || len(events) == 0 || events[len(events)-1].GetFinished() == nil {
		t.Fatalf("err = %v; want the stream to end with BatchFinished", err)
	}
	checkFits(t, events, 64<<10)
	res := results(t, events)
	if r := res["a"]; r.GetIsError() || !r.GetTruncated() || !strings.Contains(text(r), "content blocks past the first") {
		t.Errorf("50,000 blocks: %v %.200q; want a truncated result saying blocks were left out", r.GetErrorKind(), text(r))
	}
	if r := res["b"]; r.GetIsError() || len(r.GetContent()) != 10 {
		t.Errorf("10 blocks: %v, %d blocks", r.GetErrorKind(), len(r.GetContent()))
	}
}

// checkFits fails the test for any event whose encoding is over limit bytes,
// the message limit: a transport would break the stream on it.
func checkFits(tb testing.TB, events []*toolwirev1.ExecuteBatchResponse, limit int) {
	tb.Helper()
	for _, ev := range events {
		if n := proto.Size(ev); n > limit {
			tb.Errorf("an event of %d bytes (%T), over the %d-byte message limit", n, ev.GetEvent(), limit)
		}
	}
}

// A panic's value may quote whatever the tool held: the log line and the
// message quote its first bytes, not a megabyte of it.
func TestPanicValueIsCut(t *testing.T) {
	t.Parallel()
	logs := &logbuf.Buffer{}
	te := newTestBedWith(t, Config{}, Deps{Logger: slog.New(slog.NewJSONHandler(logs, nil))}, boundsTools()...)
	events := te.run(t, calls(call("a", "panic_big", `{"n":1048576}`)))
	if r := results(t, events)["a"]; !strings.Contains(text(r), "panic: ppp") || len(text(r)) > 1000 {
		t.Errorf("result of %d bytes: %.200q; want the panic's first bytes", len(text(r)), text(r))
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"tool panicked"`) {
			line = l
		}
	}
	if line == "" || len(line) > 64<<10 { // the stack besides
		t.Errorf("the panic's log line is %d bytes; want one, cut", len(line))
	}
}
