package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
)

// ranTool is a read-only tool (so a batch's calls of it run in parallel)
// that notes the IDs of the calls it ran, and first runs check, when set.
type ranTool struct {
	mu    sync.Mutex
	ids   []string
	check func(id string) error
}

func (r *ranTool) tool() tools.Tool {
	return tools.Tool{Name: "ran", Description: "notes that it ran", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
			r.mu.Lock()
			r.ids = append(r.ids, c.ID)
			check := r.check
			r.mu.Unlock()
			if check != nil {
				if err := check(c.ID); err != nil {
					return nil, err
				}
			}
			return tools.Text("ran " + c.ID), nil
		}}
}

func (r *ranTool) ran() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]bool{}
	for _, id := range r.ids {
		m[id] = true
	}
	return m
}

// parseLines parses every line of b, failing the test on one that is not
// a JSON audit line, or on a last line without its newline.
func parseLines(t *testing.T, name string, b []byte) []Line {
	t.Helper()
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("%s does not end with a whole line: …%q", name, b[max(0, len(b)-80):])
	}
	var out []Line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.CallID == "" || (l.Stage != StageRequest && l.Stage != StageOutcome) {
			t.Errorf("%s holds a line that is not an audit line (%v): %.200q", name, err, sc.Bytes())
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	return out
}

// readTrail parses every file of dir: name → its lines.
func readTrail(t *testing.T, dir string) map[string][]Line {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]Line{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = parseLines(t, e.Name(), b)
	}
	return files
}

// stages returns, per call ID, the stages of its lines in order.
func stages(lines []Line) map[string][]string {
	m := map[string][]string{}
	for _, l := range lines {
		m[l.CallID] = append(m[l.CallID], l.Stage)
	}
	return m
}

func refusedForAudit(r *toolwirev1.CallResult) bool {
	return r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED && strings.Contains(r.GetContent()[0].GetText().GetText(), "audit trail")
}

// TestRequestBeforeRun: with audit_required, each call that goes on has
// its request entry written and synced before its tool runs (the tool
// finds it in the synced output), then its outcome line; calls that do
// not go on (denied, unknown, invalid) have their outcome line only.
func TestRequestBeforeRun(t *testing.T) {
	t.Parallel()
	out := &memOut{}
	trail := start(Config{Log: "mem", Required: true}, out, slog.New(slog.DiscardHandler), 64, queueBytes)
	rt := &ranTool{}
	rt.check = func(id string) error {
		out.mu.Lock()
		synced := string(out.buf.Bytes()[:out.synced])
		out.mu.Unlock()
		if !strings.Contains(synced, `"stage":"request","caller":"alice","auth_method":"token","batch_id":`) || !strings.Contains(synced, fmt.Sprintf(`"call_id":%q`, id)) {
			return fmt.Errorf("call %s runs before its request entry is synced:\n%s", id, synced)
		}
		return nil
	}
	e, reg := testEngine(t, trail, rt.tool())
	res := run(t, e, reg, "alice", tc("p1", "ran", `{}`), tc("p2", "ran", `{}`), tc("p3", "ran", `{}`),
		tc("denied", "echo", `{"text":"nope"}`), tc("unknown", "nosuch", `{}`), tc("invalid", "sleep", `{"ms":"x"}`))
	for _, id := range []string{"p1", "p2", "p3"} {
		if r := res[id]; r.GetIsError() {
			t.Errorf("%s: %v", id, r.GetContent())
		}
	}
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	got := stages(parseLines(t, "the trail", out.buf.Bytes()))
	for id, want := range map[string]string{"p1": "request,outcome", "p2": "request,outcome", "p3": "request,outcome",
		"denied": "outcome", "unknown": "outcome", "invalid": "outcome"} {
		if g := strings.Join(got[id], ","); g != want {
			t.Errorf("%s: lines %s; want %s", id, g, want)
		}
	}
}

// TestStuckWriterRefuses: with audit_required, a writer stuck on the disk
// refuses calls (NOT_PERMITTED naming the audit trail) once RecordWait
// has passed, and runs none of them; the outcome lines name the rule.
func TestStuckWriterRefuses(t *testing.T) {
	t.Parallel()
	out := &memOut{hang: make(chan struct{}), stuck: make(chan struct{})}
	trail := start(Config{Log: "mem", Required: true}, out, slog.New(slog.DiscardHandler), 64, queueBytes)
	trail.recordWait = 50 * time.Millisecond // a bound, not an assertion: the call waits it out either way
	rt := &ranTool{}
	e, reg := testEngine(t, trail, rt.tool())
	res := run(t, e, reg, "alice", tc("a", "ran", `{}`), tc("b", "ran", `{}`))
	for _, id := range []string{"a", "b"} {
		if r := res[id]; !refusedForAudit(r) || !strings.Contains(r.GetContent()[0].GetText().GetText(), "not written within") {
			t.Errorf("%s, the writer stuck: %v", id, r)
		}
	}
	if len(rt.ran()) != 0 {
		t.Errorf("calls ran while their entries could not be written: %v", rt.ran())
	}
	close(out.hang)
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	for _, l := range parseLines(t, "the trail", out.buf.Bytes()) {
		if l.Stage == StageOutcome && (l.Decision != "deny" || l.Rule != RuleRequired || l.Outcome != "not_permitted") {
			t.Errorf("the outcome line of a call refused for the trail: %+v", l)
		}
	}
}

// TestRotationWholeLines: the file is rotated between lines only: with
// 20 KB lines and a 1 MB limit, every line of every file is whole, none is
// lost, and no file passes the limit.
func TestRotationWholeLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trail, err := Open(Config{Log: filepath.Join(dir, "audit.log"), MaxSizeMB: 1, MaxBackups: 10, Arguments: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e, reg := testEngine(t, trail)
	big := `{"text":"` + strings.Repeat("x", 20000) + `"}`
	const n = 160 // about 3.2 MB of lines
	for i := range n {
		run(t, e, reg, "alice", tc(fmt.Sprint(i), "echo", big))
	}
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	files := readTrail(t, dir)
	if len(files) < 3 {
		t.Errorf("%d files; want the log rotated past 1 MB", len(files))
	}
	seen := map[string]bool{}
	for name, lines := range files {
		for _, l := range lines {
			seen[l.CallID] = true
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() > 1<<20 {
			t.Errorf("%s: %v, %d bytes; want at most 1 MB", name, err, st.Size())
		}
	}
	if len(seen) != n {
		t.Errorf("%d calls have a line; want %d", len(seen), n)
	}
}

// TestMovedTrail: a trail file moved or deleted while serving (logrotate's
// create mode, an operator) is made again at its path, with or without
// audit_required; with it, a trail whose file cannot be made again
// refuses calls until it can.
func TestMovedTrail(t *testing.T) {
	t.Parallel()
	t.Run("required", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "logs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "audit.log")
		trail, err := Open(Config{Log: path, Required: true}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer trail.Close()
		rt := &ranTool{}
		e, reg := testEngine(t, trail, rt.tool())
		// Request entries are synced before their calls run: each file can
		// be read as soon as its call returns. (Only up to its last newline:
		// an outcome line may be being written meanwhile; the files are
		// parsed whole once the trail is closed.)
		has := func(file, id, stage string) bool {
			b, _ := os.ReadFile(file)
			for _, l := range parseLines(t, file, b[:bytes.LastIndexByte(b, '\n')+1]) {
				if l.CallID == id && l.Stage == stage {
					return true
				}
			}
			return false
		}
		requested := func(file, id string) bool { return has(file, id, StageRequest) }
		run(t, e, reg, "alice", tc("a", "ran", `{}`))
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		run(t, e, reg, "alice", tc("b", "ran", `{}`))
		if !requested(path, "b") || requested(path, "a") || !requested(path+".1", "a") {
			t.Errorf("after the file was moved, the entry of the next call is not in a new file at its path")
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		run(t, e, reg, "alice", tc("c", "ran", `{}`))
		if !requested(path, "c") {
			t.Errorf("after the file was deleted, the entry of the next call is not in a new file at its path")
		}
		// c's outcome line is written after its result: once it is, nothing
		// writes in the folder while it is removed.
		waitFor(t, func() bool { return has(path, "c", StageOutcome) })
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if r := run(t, e, reg, "alice", tc("d", "ran", `{}`))["d"]; !refusedForAudit(r) || !strings.Contains(r.GetContent()[0].GetText().GetText(), "moved or deleted") {
			t.Errorf("a call while the trail's directory is gone: %v", r)
		}
		if rt.ran()["d"] {
			t.Error("a call ran whose entry could not be written")
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if r := run(t, e, reg, "alice", tc("e", "ran", `{}`))["e"]; r.GetIsError() || !requested(path, "e") {
			t.Errorf("a call once the directory is back: %v", r)
		}
		if err := trail.Close(); err != nil {
			t.Fatal(err)
		}
		readTrail(t, dir) // every line whole
	})
	t.Run("not required", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "audit.log")
		trail, err := Open(Config{Log: path}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		e, reg := testEngine(t, trail)
		run(t, e, reg, "alice", tc("a", "echo", `{"text":"x"}`))
		waitFor(t, func() bool { w, _, _ := trail.Stats(); return w == 1 })
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		run(t, e, reg, "alice", tc("b", "echo", `{"text":"x"}`))
		if err := trail.Close(); err != nil {
			t.Fatal(err)
		}
		files := readTrail(t, dir)
		if s := stages(files["audit.log"]); len(s) != 1 || s["b"] == nil {
			t.Errorf("audit.log holds %v; want the line of b, written after the file was moved", s)
		}
		if s := stages(files["audit.log.1"]); len(s) != 1 || s["a"] == nil {
			t.Errorf("audit.log.1 holds %v; want the line of a", s)
		}
	})
}

// TestRedaction: the trail records arguments with secret fields
// redacted (redact.Fields, whose names TestFieldNames checks), at any
// depth and in name/value pairs, and keeps the rest.
func TestRedaction(t *testing.T) {
	t.Parallel()
	out := &memOut{}
	trail := start(Config{Log: "mem", Arguments: true}, out, slog.New(slog.DiscardHandler), 64, queueBytes)
	e, reg := testEngine(t, trail)
	run(t, e, reg, "alice", tc("a", "store", `{"url":"https://example.com","headers":[{"name":"Authorization","value":"Bearer s3cr3t-1"},{"name":"Accept","value":"text/plain"}],`+
		`"auth":{"refreshToken":"s3cr3t-2"},"env":[{"key":"OPENAI_API_KEY","value":"s3cr3t-3"}],"config":{"x-api-key":"s3cr3t-4","clientSecret":"s3cr3t-5"}}`))
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.buf.String(), "s3cr3t") {
		t.Errorf("the trail holds a secret:\n%s", out.buf.String())
	}
	for _, kept := range []string{`"url":"https://example.com"`, `{"name":"Accept","value":"text/plain"}`, `{"name":"Authorization","value":"[redacted]"}`} {
		if !strings.Contains(out.buf.String(), kept) {
			t.Errorf("the line lacks %s:\n%s", kept, out.buf.String())
		}
	}
}

// TestCloseGivesUpOnAStuckWriter: Close waits for the writer at most
// closeWait; a writer stuck in its output (stdout a pipe nobody reads, a
// hung network filesystem) is left, its output not closed under it (the
// descriptor could be reused while it writes), and what it held is
// reported. Close waited for ever: serve, which promises a shutdown bound
// (45 s with --drain-timeout 1s), still ran 75 s after SIGTERM with
// --audit-log - into an unread pipe.
func TestCloseGivesUpOnAStuckWriter(t *testing.T) {
	t.Parallel()
	out := &memOut{hang: make(chan struct{}), stuck: make(chan struct{})}
	var logged bytes.Buffer
	var logMu sync.Mutex
	trail := start(Config{Log: "-"}, out, slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &logMu}, nil)), 64, queueBytes)
	trail.closeWait = 20 * time.Millisecond // a bound, not an assertion: Close waits it out either way
	e, reg := testEngine(t, trail)
	run(t, e, reg, "alice", tc("a", "echo", `{"text":"x"}`), tc("b", "echo", `{"text":"y"}`))
	<-out.stuck

	closed := make(chan error, 1)
	go func() { closed <- trail.Close() }()
	var err error
	select {
	case err = <-closed:
	case <-time.After(time.Until(testenv.Deadline(t))):
		close(out.hang)
		t.Fatal("Close waits for a writer stuck in its output")
	}
	if err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Errorf("Close of a stuck trail: %v; want an error saying the writer is stuck", err)
	}
	if out.isClosed() {
		t.Error("the output was closed while the writer was in a Write")
	}
	logMu.Lock()
	if !strings.Contains(logged.String(), "stuck") {
		t.Errorf("nothing logged of the stuck writer:\n%s", logged.String())
	}
	logMu.Unlock()

	// Released, the writer finishes what it held, and closes the output.
	close(out.hang)
	<-trail.done
	if !out.isClosed() {
		t.Error("the output was not closed once the writer finished")
	}
	if n := len(out.lines(t)); n != 2 {
		t.Errorf("%d lines written once the output took them; want 2", n)
	}
}
