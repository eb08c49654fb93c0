package main

import (
	"bytes"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestWithDefaultPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"localhost":           "localhost:50051",
		"10.0.0.7":            "10.0.0.7:50051",
		"toolwire.svc":        "toolwire.svc:50051",
		"[::1]":               "[::1]:50051",
		"::1":                 "[::1]:50051",
		"localhost:7":         "localhost:7",
		"[::1]:7":             "[::1]:7",
		"dns:///toolwire:443": "dns:///toolwire:443",
		"unix:///tmp/tw.sock": "unix:///tmp/tw.sock",
	} {
		if got := withDefaultPort(in); got != want {
			t.Errorf("withDefaultPort(%q) = %q; want %q", in, got, want)
		}
	}
	// The client commands dial it (grpc-go's own default would be 443).
	cf := clientFlags{addr: "127.0.0.1"}
	_, _, done, err := cf.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done()
	if cf.addr != "127.0.0.1:50051" {
		t.Errorf("--addr 127.0.0.1 dials %s; want 127.0.0.1:50051", cf.addr)
	}
	// A URL, as the HTTP port's are written, says what to write instead
	// (grpc-go said "too many colons in address").
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":       "--addr http://127.0.0.1:8080 is a URL; the client commands take the address of a gRPC port: --addr 127.0.0.1:8080",
		"https://toolwire.example/x/": "--addr https://toolwire.example/x/ is a URL; the client commands take the address of a gRPC port: --addr toolwire.example --tls",
	} {
		cf := clientFlags{addr: in}
		if _, _, _, err := cf.dial(t.Context()); err == nil || err.Error() != want {
			t.Errorf("--addr %s: %v; want %q", in, err, want)
		}
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		v    string
		rest []string
	}{
		{[]string{"-v", "x", "a", "b"}, "x", []string{"a", "b"}},
		{[]string{"a", "-v", "x", "b"}, "x", []string{"a", "b"}},
		{[]string{"a", "b", "--v=x"}, "x", []string{"a", "b"}},
		{[]string{"a", "--", "-v", "x"}, "", []string{"a", "-v", "x"}},
		{[]string{"-", "-v", "x"}, "x", []string{"-"}},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		v := fs.String("v", "", "")
		if _, err := parseFlags(fs, tt.args); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if *v != tt.v || !cmp.Equal(fs.Args(), tt.rest) {
			t.Errorf("%q: -v %q, args %q; want %q, %q", tt.args, *v, fs.Args(), tt.v, tt.rest)
		}
	}
}

// TestFlagsAfterToolName runs "toolwire call NAME --flags JSON", as people
// type it, against a real server.
func TestFlagsAfterToolName(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"call", "echo", "--addr", s.addr, "--json", `{"text":"hi"}`, "--id", "late"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("call: %v\n%s", err, stderr.String())
	}
	var r toolwirev1.CallResult
	if err := protojson.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("no CallResult on stdout: %v\n%s", err, stdout.String())
	}
	if r.GetCallId() != "late" || r.GetStructuredContent() != `{"text":"hi"}` {
		t.Errorf("call_id %q, structured content %q; want the flags after the name applied", r.GetCallId(), r.GetStructuredContent())
	}
}

// TestHelpSummary checks that every command's -h opens with the one line
// saying what it does.
func TestHelpSummary(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{c.name, "-h"}, &stdout, &stderr); err != nil {
			t.Errorf("%s -h: %v", c.name, err)
		}
		first, rest, _ := strings.Cut(stderr.String(), "\n")
		if first != c.summary || !strings.Contains(rest, "usage: toolwire "+c.name) || !strings.Contains(rest, "-addr") == (c.name != "serve") {
			t.Errorf("%s -h starts %q; want the summary %q, then the usage and flags:\n%s", c.name, first, c.summary, stderr.String())
		}
		if !strings.Contains(usage, c.summary) {
			t.Errorf("toolwire's usage does not list %s", c.name)
		}
	}
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, &stdout, &bytes.Buffer{}); err != nil || !strings.HasPrefix(stdout.String(), "toolwire runs the tool calls") {
		t.Errorf("toolwire -h: %v, %q; want it to open with what toolwire does", err, stdout.String())
	}
}

// progressEvents are a call's events: started, reports at the given
// offsets, then its result.
func progressEvents(at ...time.Duration) (evs []*toolwirev1.ExecuteBatchResponse, times []time.Duration) {
	evs = append(evs, &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Started{Started: &toolwirev1.CallStarted{CallId: "c"}}})
	times = append(times, 0)
	for i, d := range at {
		p, total := float64(i+1), float64(len(at))
		evs = append(evs, &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
			CallId: "c", Progress: &p, Total: &total, Message: fmt.Sprintf("step %d", i+1)}}})
		times = append(times, d)
	}
	evs = append(evs, &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Result{Result: &toolwirev1.CallResult{
		CallId: "c", Duration: durationpb.New(2 * time.Second)}}})
	times = append(times, at[len(at)-1])
	return evs, times
}

func TestProgressView(t *testing.T) {
	t.Parallel()
	render := func(tty bool, at ...time.Duration) string {
		var out bytes.Buffer
		evs, times := progressEvents(at...)
		start := time.Unix(0, 0)
		i := 0
		v := &progressView{w: &out, tty: tty, width: 80, now: func() time.Time { return start.Add(times[i]) }}
		seq := func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
			for i = range evs {
				if !yield(evs[i], nil) {
					return
				}
			}
		}
		for range v.show(seq) {
		}
		return out.String()
	}

	t.Run("terminal: one line redrawn in place", func(t *testing.T) {
		got := render(true, 0, 100*time.Millisecond, 200*time.Millisecond)
		want := "\r\x1b[Kstarted c\r\x1b[Kprogress 1/3: step 1\r\x1b[Kprogress 2/3: step 2\r\x1b[Kprogress 3/3: step 3\r\x1b[Kfinished c in 2s\n"
		if got != want {
			t.Errorf("terminal output\n%q\nwant\n%q", got, want)
		}
	})
	t.Run("terminal: a tool's unfinished output line is kept", func(t *testing.T) {
		var out bytes.Buffer
		v := &progressView{w: &out, tty: true, width: 80, now: time.Now}
		one := 1.0
		evs := []*toolwirev1.ExecuteBatchResponse{
			{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{CallId: "c", Output: "compiling"}}},
			{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{CallId: "c", Progress: &one}}},
		}
		for range v.show(func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
			for _, ev := range evs {
				yield(ev, nil)
			}
		}) {
		}
		if want := "compiling\n\r\x1b[Kprogress 1\r\x1b[K"; out.String() != want {
			t.Errorf("terminal output %q; want %q", out.String(), want)
		}
	})
	t.Run("pipe: a line per report, at most one a second, the last one kept", func(t *testing.T) {
		got := render(false, 0, 100*time.Millisecond, 200*time.Millisecond, 1500*time.Millisecond, 1600*time.Millisecond)
		want := "started c\nprogress 1/5: step 1\nprogress 4/5: step 4\nprogress 5/5: step 5\nfinished c in 2s\n"
		if got != want {
			t.Errorf("pipe output\n%q\nwant\n%q", got, want)
		}
	})
}

// writePNG writes a w×h PNG to path and returns its bytes.
func writePNG(t *testing.T, path string, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCallImages reads a PNG with the real read_file tool: the image prints
// as a line saying what it is, and --save-images writes its bytes and names
// the file on that line.
func TestCallImages(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	data := writePNG(t, filepath.Join(ws, "pic.png"), 40, 30)
	s := startServe(t, "--no-workspace=false", "--workspace", ws)
	out := filepath.Join(t.TempDir(), "images")

	got := runCmd(t, s.addr, "call", "--id", "img", "--save-images", out, "read_file", `{"path":"pic.png"}`)
	if got.err != nil {
		t.Fatalf("call: %v\n%s", got.err, got.stderr)
	}
	if want := fmt.Sprintf("[image image/png, %d bytes, saved as %s]\n", len(data), filepath.Join(out, "img-1.png")); !strings.Contains(got.stdout, want) {
		t.Errorf("stdout %q; want it to show %q, the saved file's name with it", got.stdout, want)
	}
	saved, err := os.ReadFile(filepath.Join(out, "img-1.png"))
	if err != nil || !bytes.Equal(saved, data) {
		t.Errorf("saved image: %v, %d bytes; want the %d bytes of pic.png", err, len(saved), len(data))
	}
}

func TestBatchFileShape(t *testing.T) {
	t.Parallel()
	for _, content := range []string{`{"name":"echo"}`, `"echo"`, ``} {
		_, err := readBatchFile(writeFile(t, "b.json", content), nil)
		if err == nil || !strings.Contains(err.Error(), "want a JSON array of calls, such as") {
			t.Errorf("batch file %q: %v; want it to say a JSON array of calls is wanted", content, err)
		}
	}
}

// TestBatchFileBadCall: an array whose elements are not calls, or whose
// fields have the wrong JSON kind, is explained in the file's terms (which
// call, which field, the shape wanted), not with Go's type names.
func TestBatchFileBadCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ content, want string }{
		{`[1,2]`, "call 0: 1 is not a call; want a JSON array of calls, such as"},
		{`[{"name":"echo"},"echo"]`, `call 1: "echo" is not a call; want a JSON array of calls, such as`},
		{`[{"call_id":7,"name":"echo"}]`, `call 0: "call_id" is a JSON number; want a JSON array of calls, such as`},
		{`[{"name":"echo","nam":"x"}]`, `call 0: json: unknown field "nam"`},
		{`[{"name":"echo","timeout":5}]`, `call 0: want a duration as a string such as "30s", not 5`},
	} {
		_, err := readBatchFile(writeFile(t, "b.json", tc.content), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "main.") {
			t.Errorf("batch file %s: %v; want it to say %q (and no Go type names)", tc.content, err, tc.want)
		}
	}
}
